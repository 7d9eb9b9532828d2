"""Team presence on each cluster (issue 32, item 5): volumes and datasets belong to clusters, notebooks name theirs.

Forward-safe on an install of one cluster: every existing volume is a claim in the cluster configured in settings
(the row ``default``, made by gpus.0011), every dataset is published there, and every notebook whose home volume
exists has it there. Registered clusters get their team presence rows from the first presence pass."""

import django.db.models.deletion
import django.utils.timezone
import gpus.models
from django.db import migrations, models


def existing_rows_live_on_the_settings_cluster(apps, schema_editor):
    Cluster = apps.get_model("gpus", "Cluster")
    TeamVolume = apps.get_model("jobs", "TeamVolume")
    Dataset = apps.get_model("jobs", "Dataset")
    Notebook = apps.get_model("jobs", "Notebook")
    cluster, _ = Cluster.objects.get_or_create(
        name="default", defaults={"display_name": "Default cluster", "connection": "settings"}
    )
    TeamVolume.objects.filter(cluster__isnull=True).update(cluster=cluster)
    for dataset in Dataset.objects.all():
        dataset.clusters.add(cluster)
    homes = TeamVolume.objects.filter(notebook__isnull=False).values_list("notebook_id", flat=True)
    Notebook.objects.filter(pk__in=homes, cluster__isnull=True).update(cluster=cluster)


class Migration(migrations.Migration):

    dependencies = [
        ("gpus", "0011_fleet_clusters"),
        ("portal", "0002_alter_auditevent_action"),
        ("jobs", "0016_quota_cluster_caps"),
    ]

    operations = [
        migrations.AddField(
            model_name="teamvolume",
            name="cluster",
            field=models.ForeignKey(
                null=True, on_delete=django.db.models.deletion.CASCADE, related_name="team_volumes", to="gpus.cluster"
            ),
        ),
        migrations.AddField(
            model_name="dataset",
            name="clusters",
            field=models.ManyToManyField(blank=True, related_name="datasets", to="gpus.cluster"),
        ),
        migrations.AddField(
            model_name="notebook",
            name="clusters",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="notebook",
            name="cluster",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="notebooks",
                to="gpus.cluster",
            ),
        ),
        migrations.RunPython(existing_rows_live_on_the_settings_cluster, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="teamvolume",
            name="cluster",
            field=models.ForeignKey(
                default=gpus.models.settings_cluster_pk,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="team_volumes",
                to="gpus.cluster",
            ),
        ),
        migrations.RemoveConstraint(model_name="teamvolume", name="unique_team_volume"),
        migrations.AddConstraint(
            model_name="teamvolume",
            constraint=models.UniqueConstraint(fields=("team", "cluster", "name"), name="unique_team_volume"),
        ),
        migrations.CreateModel(
            name="TeamPresence",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "state",
                    models.CharField(
                        choices=[("pending", "Pending"), ("in_step", "In step"), ("error", "Error")],
                        default="pending",
                        max_length=8,
                    ),
                ),
                ("wanted_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("synced_at", models.DateTimeField(blank=True, null=True)),
                ("error", models.TextField(blank=True)),
                (
                    "cluster",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="team_presence", to="gpus.cluster"
                    ),
                ),
                (
                    "team",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="presence", to="portal.team"
                    ),
                ),
            ],
            options={
                "ordering": ["team__slug", "cluster__name"],
                "constraints": [models.UniqueConstraint(fields=("team", "cluster"), name="unique_team_presence")],
            },
        ),
    ]
