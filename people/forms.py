"""The person's page's form: what they may choose. Shapes are checked by the services (users.fields),
which say which field is wrong; the form only reads the boxes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy
from django_stubs_ext import StrOrPromise

from delivery.models import Destination
from scheduling.celebration import Visibility
from scheduling.event_types import EventType

# The event types as the page names them (EventType's labels are the console's, in English).
EVENT_TYPE_NAMES: dict[str, StrOrPromise] = {
    EventType.BIRTHDAY: _("Birthday"),
    EventType.ANNIVERSARY: _("Wedding anniversary"),
}
VISIBILITY_NAMES = {
    Visibility.PUBLIC: _("Public: every channel that greets people"),
    Visibility.PRIVATE: _("Private: only where the greeting reaches me alone"),
    Visibility.NONE: _("Not at all: nothing, anywhere"),
}
CONSENT_CHOICES = [
    ("", _("As the company decides")),
    ("yes", pgettext_lazy("mention consent", "Yes, mention me")),
    ("no", pgettext_lazy("mention consent", "No, never mention me")),
]
# The services' names of the fields the page sets (users.fields), and the form's.
SERVICE_FIELDS = (
    "hide_age",
    "language",
    "send_time",
    "slack_user_id",
    "discord_user_id",
    "teams_user_id",
    "mention_consent",
)


def visibility_field(event_type: str) -> str:
    return f"visibility_{event_type}"


def event_type_name(event_type: str) -> str:
    return str(EVENT_TYPE_NAMES.get(event_type, EventType(event_type).label))


def _optional_text(label: StrOrPromise, help_text: StrOrPromise, **kwargs: Any) -> forms.CharField:
    """A text the person may leave empty (the default, or none); its shape is the services' to check."""
    return forms.CharField(required=False, label=label, help_text=help_text, **kwargs)


class PersonPageForm(forms.Form):
    """Every choice on the page, posted together: all are stored, or (one being wrong) none."""

    # The version of their row the page showed (users.services.user_update's expected_versions):
    # an operator's edit made meanwhile is not overwritten with what the page showed before it.
    version = forms.IntegerField(widget=forms.HiddenInput)
    hide_age = forms.BooleanField(required=False, label=_("Never say my age"))
    language = _optional_text(
        _("Language"), _("A language tag such as en, de or de-AT; empty: the company's default.")
    )
    send_time = _optional_text(
        _("Send time"),
        _("Your local time, HH:MM; empty: the company's default."),
        widget=forms.TimeInput(attrs={"type": "time"}),
    )
    slack_user_id = _optional_text(_("Slack user ID"), _("Such as U0123ABCD (not @name)."))
    discord_user_id = _optional_text(
        _("Discord user ID"), _("The number Discord shows, such as 80351110224678912.")
    )
    teams_user_id = _optional_text(
        _("Microsoft Teams user"), _("Your sign-in name (ada@example.com) or object ID.")
    )
    mention_consent = forms.ChoiceField(
        required=False,
        choices=CONSENT_CHOICES,
        label=_("Mention me in greetings"),
        widget=forms.RadioSelect,
    )
    # The shared destinations the page listed, those it showed ticked, and those ticked now (may
    # announce me): only a box the person changed leaves or rejoins its destination, so a
    # destination added, or left through a mail's unsubscribe, since the page was shown is not touched.
    shown = forms.TypedMultipleChoiceField(required=False, coerce=int, widget=forms.MultipleHiddenInput)
    announced = forms.TypedMultipleChoiceField(required=False, coerce=int, widget=forms.MultipleHiddenInput)
    announce = forms.TypedMultipleChoiceField(
        required=False, coerce=int, label=_("Who may announce me"), widget=forms.CheckboxSelectMultiple
    )

    def __init__(
        self,
        *args: Any,
        event_types: Sequence[str],
        defaults: dict[str, str],
        shared: Sequence[Destination],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.event_types = list(event_types)
        for event_type in self.event_types:
            default = VISIBILITY_NAMES[Visibility(defaults.get(event_type, Visibility.PUBLIC))]
            self.fields[visibility_field(event_type)] = forms.ChoiceField(
                required=False,
                label=event_type_name(event_type),
                choices=[
                    ("", _("As the company decides (%(default)s)") % {"default": default}),
                    *VISIBILITY_NAMES.items(),
                ],
                widget=forms.RadioSelect,
            )
        destinations = [(destination.id, destination.name) for destination in shared]
        for name in ("shown", "announced", "announce"):
            field = self.fields[name]
            assert isinstance(field, forms.TypedMultipleChoiceField)
            field.choices = destinations

    def visibility_fields(self) -> list[forms.BoundField]:
        return [self[visibility_field(event_type)] for event_type in self.event_types]

    def service_data(self) -> dict[str, Any]:
        """What users.services.user_update is given: each field as the API would send it."""
        data = self.cleaned_data
        consent = data["mention_consent"]
        return {
            "hide_age": data["hide_age"],
            "language": data["language"].strip(),
            "send_time": data["send_time"].strip() or None,
            "slack_user_id": data["slack_user_id"].strip(),
            "discord_user_id": data["discord_user_id"].strip(),
            "teams_user_id": data["teams_user_id"].strip(),
            "mention_consent": None if consent == "" else consent == "yes",
            "visibility": {
                event_type: data[visibility_field(event_type)] or None for event_type in self.event_types
            },
        }

    def opt_outs(self) -> dict[int, bool]:
        """For each destination whose box the person changed: whether they leave it (True) or rejoin it."""
        before, after = set(self.cleaned_data["announced"]), set(self.cleaned_data["announce"])
        return {
            destination_id: destination_id not in after
            for destination_id in self.cleaned_data["shown"]
            if (destination_id in before) != (destination_id in after)
        }
