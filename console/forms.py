"""Forms for recipients, sharing the API's rules (users.fields.clean_user_fields), and the fields a
destination's form shares with them."""

from __future__ import annotations

from datetime import date

from django import forms
from django.core.exceptions import ValidationError

from scheduling.celebration import Visibility, month_day, year_known
from scheduling.event_types import EventType
from scheduling.labels import labels_from_text
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
    """Labels typed as one line, separated by commas or semicolons (scheduling.labels.labels_from_text, as an
    import's cell is); checked by the shared rule.

    The list goes to clean_user_fields (scheduling.labels.clean_labels), which says what is wrong
    with a label, as the API's 400 does.
    """

    def __init__(self, **kwargs):
        super().__init__(required=False, **kwargs)

    def to_python(self, value):
        return labels_from_text(super().to_python(value))

    def prepare_value(self, value):
        return ", ".join(value) if isinstance(value, list | tuple) else value

    def has_changed(self, initial, data):
        return sorted(initial or []) != sorted({label.lower() for label in self.to_python(data)})


# --- the person's say (scheduling.celebration) ---


class DateOfBirthFormField(forms.CharField):
    """A date of birth typed as YYYY-MM-DD, or --MM-DD without the year; checked by the shared rule."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def to_python(self, value):
        text = (super().to_python(value) or "").strip()
        if not text or text.startswith("--"):
            return text or None  # the shared rule reads --MM-DD, and says what is wrong with it
        try:
            return date.fromisoformat(text)
        except ValueError:
            raise ValidationError("Enter a date as YYYY-MM-DD, or --MM-DD without the year.") from None

    def prepare_value(self, value):
        if isinstance(value, date):
            return value.isoformat() if year_known(value) else month_day(value)
        return value

    def has_changed(self, initial, data):
        return self.prepare_value(initial) != (data or "").strip()


def visibility_field_name(event_type: str) -> str:
    """The form's field of the person's visibility of one event type."""
    return f"visibility_{event_type}"


VISIBILITY_FIELDS = {event_type: visibility_field_name(event_type) for event_type in EventType.values}


class VisibilityFormField(forms.ChoiceField):
    def __init__(self, *, label: str):
        super().__init__(
            label=label,
            required=False,
            choices=[("", "The company default"), *Visibility.choices],
            help_text="Public: every destination; private: only destinations reaching the person alone; "
            "not celebrated: nothing. Each change is recorded with who made it and when.",
        )


# --- end of the person's say ---


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
    date_of_birth = DateOfBirthFormField(
        label="Date of birth", help_text=FIELDS_BY_NAME["date_of_birth"].form_help
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            for choice in self.instance.celebration_choices.all():
                name = VISIBILITY_FIELDS.get(choice.event_type)
                if name in self.fields:
                    self.initial[name] = choice.visibility

    def visibility_changes(self) -> dict[str, str | None]:
        """The visibility choices the operator changed, as users.services takes them (None: the default)."""
        return {
            event_type: self.cleaned_data.get(name) or None
            for event_type, name in VISIBILITY_FIELDS.items()
            if name in self.changed_data
        }

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


# One field per event type, declared on the form as the admin's fieldsets name them.
for _event_type, _label in EventType.choices:
    _field = VisibilityFormField(label=f"{_label}: visibility")
    RecipientAdminForm.declared_fields[visibility_field_name(_event_type)] = _field
    RecipientAdminForm.base_fields[visibility_field_name(_event_type)] = _field
