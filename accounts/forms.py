from django import forms
from django.conf import settings

from .choices import TokenScope
from .models import dns_label

SCOPE_HELP = (
    "Read: look only. Submit: also submit, cancel and resubmit jobs, run notebooks and services. "
    "Manage: everything you may do yourself."
)


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What will use it, e.g. 'nightly training pipeline'.")
    scope = forms.ChoiceField(choices=TokenScope.choices, initial=TokenScope.SUBMIT, help_text=SCOPE_HELP)
    days = forms.IntegerField(
        min_value=1,
        max_value=settings.PORTAL_TOKEN_MAX_DAYS,
        initial=settings.PORTAL_TOKEN_DEFAULT_DAYS,
        help_text=f"Lifetime in days, at most {settings.PORTAL_TOKEN_MAX_DAYS}.",
    )

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("Give the token a name that says what uses it.")
        return name


class ServiceAccountForm(forms.Form):
    name = forms.CharField(
        max_length=40,
        validators=[dns_label],
        help_text="Lowercase letters, digits and '-', e.g. 'nightly-ci'. Its jobs show it as their owner.",
    )
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}), help_text="What uses it.")


class RotateForm(forms.Form):
    overlap_hours = forms.IntegerField(min_value=0, max_value=7 * 24, initial=0, required=False)
