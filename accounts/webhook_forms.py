"""The team page's webhook form: choices come from the registered event types (core.webhooks)."""

from django import forms

from core import webhooks
from core.choices import WebhookFormat


def event_choices() -> list[tuple[str, str]]:
    """Each family ("every job event") followed by its event types."""
    known = webhooks.registered_events()
    choices = []
    for family in webhooks.families():
        choices.append((f"{family}.*", f"Every {family.replace('_', ' ')} event"))
        choices += [(name, f"{name} — {label}") for name, label in known.items() if name.startswith(f"{family}.")]
    return choices


class WebhookForm(forms.Form):
    name = forms.CharField(max_length=100, required=False, help_text="What receives the events, e.g. 'team Slack'.")
    url = forms.CharField(max_length=500, required=False, label="URL", help_text="An https:// endpoint.")
    events = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)
    format = forms.ChoiceField(choices=WebhookFormat.choices, initial=WebhookFormat.JSON)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["events"].choices = event_choices()
