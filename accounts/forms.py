from django import forms
from django.conf import settings


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What will use it, e.g. 'nightly training pipeline'.")
    days = forms.IntegerField(
        min_value=1,
        max_value=settings.PORTAL_TOKEN_MAX_DAYS,
        initial=settings.PORTAL_TOKEN_DEFAULT_DAYS,
        help_text=f"Lifetime in days, at most {settings.PORTAL_TOKEN_MAX_DAYS}.",
    )
    read_only = forms.BooleanField(required=False, help_text="Only allow reading (GET) with this token.")

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("Give the token a name that says what uses it.")
        return name
