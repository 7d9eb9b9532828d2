"""Each webhook names the secret key its signing secret derives from (core.secret_keys), so a rotation of
DJANGO_SECRET_KEY with the old key in DJANGO_SECRET_KEY_FALLBACKS leaves its receiver verifying.

Existing webhooks were made under the key this migration runs with: run it before the first rotation (with the key
the webhooks were made under as DJANGO_SECRET_KEY). The column's database default is "" so a process still on the
previous code can insert a webhook during a rolling upgrade; "" reads as "the current key", what that code meant.
"""

from django.db import migrations, models

import core.secret_keys


def name_the_current_key(apps, schema_editor):
    Webhook = apps.get_model("core", "Webhook")
    Webhook.objects.filter(secret_key_id="").update(secret_key_id=core.secret_keys.current_key_id())


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0002_delivery_dropped"),
    ]

    operations = [
        migrations.AddField(
            model_name="webhook",
            name="secret_key_id",
            field=models.CharField(
                db_default="", default=core.secret_keys.current_key_id, editable=False, max_length=16
            ),
        ),
        migrations.RunPython(name_the_current_key, migrations.RunPython.noop, elidable=True),
    ]
