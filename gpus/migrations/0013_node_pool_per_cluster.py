"""Node pools belong to a cluster: a pool's name is unique within its cluster, not across the fleet (two GKE clusters
each have a ``default-pool``, and their declared taints are their own).

Forward-safe: every declaration saved before the fleet was about the cluster configured in settings, so each existing
row is put in the cluster ``default``."""

import django.db.models.deletion
import gpus.models
from django.db import migrations, models


def declarations_belong_to_the_settings_cluster(apps, schema_editor):
    Cluster = apps.get_model("gpus", "Cluster")
    NodePool = apps.get_model("gpus", "NodePool")
    if not NodePool.objects.filter(cluster__isnull=True).exists():
        return
    cluster, _ = Cluster.objects.get_or_create(
        name="default", defaults={"display_name": "Default cluster", "connection": "settings"}
    )
    NodePool.objects.filter(cluster__isnull=True).update(cluster=cluster)


class Migration(migrations.Migration):

    dependencies = [
        ("gpus", "0012_resourceclass_cluster"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="nodepool",
            options={"ordering": ["cluster__name", "name"]},
        ),
        migrations.AlterField(
            model_name="nodepool",
            name="name",
            field=models.CharField(blank=True, max_length=253),
        ),
        migrations.AddField(
            model_name="nodepool",
            name="cluster",
            field=models.ForeignKey(
                null=True, on_delete=django.db.models.deletion.CASCADE, related_name="node_pools", to="gpus.cluster"
            ),
        ),
        migrations.RunPython(declarations_belong_to_the_settings_cluster, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="nodepool",
            name="cluster",
            field=models.ForeignKey(
                default=gpus.models.settings_cluster_pk,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="node_pools",
                to="gpus.cluster",
            ),
        ),
        migrations.AddConstraint(
            model_name="nodepool",
            constraint=models.UniqueConstraint(fields=("cluster", "name"), name="unique_node_pool_per_cluster"),
        ),
    ]
