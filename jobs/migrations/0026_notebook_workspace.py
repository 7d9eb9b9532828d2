from django.db import migrations, models


class Migration(migrations.Migration):
    """A notebook's workspace kind (existing notebooks are Jupyter, as they were) and the latest request its sign-in
    endpoint let through (RStudio's activity signal)."""

    dependencies = [
        ("jobs", "0025_workload_templates"),
    ]

    operations = [
        migrations.AddField(
            model_name="notebook",
            name="workspace",
            field=models.CharField(
                choices=[
                    ("jupyter", "JupyterLab"),
                    ("code-server", "VS Code (code-server)"),
                    ("rstudio", "RStudio Server"),
                ],
                default="jupyter",
                max_length=12,
            ),
        ),
        migrations.AddField(
            model_name="notebook",
            name="last_request_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
