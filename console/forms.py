"""Forms for recipients, sharing the API's rules (users.validators.clean_user_fields)."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError

from users.models import User
from users.services import USER_FIELDS
from users.validators import clean_user_fields


class RecipientAdminForm(forms.ModelForm):
    class Meta:
        model = User
        fields = list(USER_FIELDS)
        help_texts = {
            "timezone": "IANA time zone name, e.g. America/New_York or Asia/Kathmandu "
            "(not an offset such as +05:45: offsets do not follow daylight saving time).",
            "anniversary_date": "Optional: the wedding date. With it the recipient also gets a "
            "wedding anniversary message every year.",
            "external_id": "Optional: the client's own id for this recipient, held by no other "
            "(imports and API clients find the recipient by it).",
        }

    def clean(self) -> dict:
        cleaned = super().clean()
        try:
            valid = clean_user_fields({field: cleaned.get(field) for field in USER_FIELDS})
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                # A field the form already refused (required, not a date) keeps
                # its own message; the shared rule would only say it again.
                if field not in self.errors:
                    self.add_error(field, errors)
            return cleaned
        cleaned.update(valid)
        return cleaned

    def _post_clean(self) -> None:
        # ModelForm would run User.clean(), i.e. clean_user_fields again, on an
        # instance missing the fields that just failed, and repeat or garble the
        # messages. Only a valid form needs the instance built.
        # (django.contrib.auth's UserCreationForm overrides _post_clean likewise.)
        if self.errors:
            return
        super()._post_clean()
