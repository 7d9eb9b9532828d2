"""Each audit record names the cluster of the fleet its action concerns (core.audit), by name. Existing records
concern no named cluster: they keep "" (the column's database default, so a process still on the previous code can
append records during a rolling upgrade)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0003_webhook_secret_key_id"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditevent",
            name="cluster",
            field=models.CharField(blank=True, db_default="", default="", max_length=63),
        ),
        migrations.AddIndex(
            model_name="auditevent",
            index=models.Index(fields=["cluster", "-when"], name="audit_cluster_newest"),
        ),
    ]
