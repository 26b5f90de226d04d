"""Forms for recipients, sharing the API's rules (users.fields.clean_user_fields), and the fields a
destination's form shares with them."""

from __future__ import annotations

import re

from django import forms
from django.core.exceptions import ValidationError

from users.fields import FIELDS_BY_NAME, USER_FIELDS, clean_user_fields
from users.models import User


class TimeOfDayFormField(forms.CharField):
    """A local time of day typed as HH:MM (a recipient's send time, a destination's digest time), passed on
    as typed to the cleaner the API's value goes to (clean_user_fields, the destination's), which reads it
    by the one HH:MM rule (scheduling.times.time_of_day).

    Text rather than Django's TimeField, which would also take "9:00" or
    "09:00:00.5" and so accept in the console what the API refuses.
    """

    def __init__(self, **kwargs):
        super().__init__(required=False, empty_value=None, **kwargs)

    def prepare_value(self, value):
        return value.strftime("%H:%M") if hasattr(value, "strftime") else value

    def has_changed(self, initial, data):
        return self.prepare_value(initial) != (data or None) if initial is not None else bool(data)


class LabelsFormField(forms.CharField):
    """Labels typed as one line, separated by commas, semicolons or spaces; checked by the shared rule.

    The list goes to clean_user_fields (scheduling.labels.clean_labels), which says what is wrong
    with a label, as the API's 400 does.
    """

    def __init__(self, **kwargs):
        super().__init__(required=False, **kwargs)

    def to_python(self, value):
        return [label for label in re.split(r"[,;\s]+", super().to_python(value) or "") if label]

    def prepare_value(self, value):
        return ", ".join(value) if isinstance(value, list | tuple) else value

    def has_changed(self, initial, data):
        return sorted(initial or []) != sorted({label.lower() for label in self.to_python(data)})


class RecipientAdminForm(forms.ModelForm):
    # The help texts are users.fields' (form_help), as the fields are.
    send_time = TimeOfDayFormField(label="Send time", help_text=FIELDS_BY_NAME["send_time"].form_help)
    labels = LabelsFormField(label="Labels", help_text=FIELDS_BY_NAME["labels"].form_help)
    # Text checked by the shared rule (users.validators.clean_email), which says what is wrong; shown as an
    # email input, so a phone offers its email keyboard.
    email = forms.CharField(
        label="Email",
        required=False,
        max_length=1000,
        widget=forms.EmailInput,
        help_text=FIELDS_BY_NAME["email"].form_help,
    )

    class Meta:
        model = User
        fields = list(USER_FIELDS)
        help_texts = {name: FIELDS_BY_NAME[name].form_help for name in USER_FIELDS}

    def clean(self) -> dict:
        cleaned = super().clean()
        assert cleaned is not None  # ModelForm.clean returns cleaned_data
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
        # BaseForm's own hook (ModelForm overrides it too); missing from django-stubs.
        super()._post_clean()  # type: ignore[misc]
