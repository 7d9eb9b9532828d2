"""A plan run names the cluster it replays (issue 32). Forward-safe: existing runs get "" (the whole fleet, which is
what they replayed: the cluster was the fleet's only one), and their stored proposals, which have no "cluster",
are read as the default cluster's (planner.proposals.from_json)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("planner", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="planrun",
            name="cluster",
            field=models.CharField(blank=True, default="", max_length=63),
        ),
    ]
