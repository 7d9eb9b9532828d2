"""Samples, rollups and agent tokens name their cluster (issue 32): node names are unique per cluster only.

Existing rows belong to the cluster configured in settings (the row ``default``, made here if the inventory has not
made it yet), as gpus.0011 did for nodes. The columns are added empty and filled; the tokens' then gets its default
and becomes required (samples and rollups keep theirs nullable: a removed cluster's history stays, emptied)."""

import django.db.models.deletion
from django.db import migrations, models

import gpus.models


def settings_cluster_holds_every_row(apps, schema_editor):
    Cluster = apps.get_model("gpus", "Cluster")
    cluster, _ = Cluster.objects.get_or_create(
        name="default", defaults={"display_name": "Default cluster", "connection": "settings"}
    )
    for name in ("GpuSample", "GpuRollup", "NodeAgentToken"):
        apps.get_model("telemetry", name).objects.filter(cluster__isnull=True).update(cluster=cluster)


class Migration(migrations.Migration):

    dependencies = [
        ('gpus', '0011_fleet_clusters'),
        ('telemetry', '0001_initial'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='nodeagenttoken',
            options={'ordering': ['cluster', 'node_name', '-created_at']},
        ),
        migrations.AddField(
            model_name='gpurollup',
            name='cluster',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='gpus.cluster'),
        ),
        migrations.AddField(
            model_name='gpusample',
            name='cluster',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='gpus.cluster'),
        ),
        migrations.AddField(
            model_name='nodeagenttoken',
            name='cluster',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.CASCADE, related_name='agent_tokens', to='gpus.cluster'),
        ),
        migrations.RunPython(settings_cluster_holds_every_row, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='nodeagenttoken',
            name='cluster',
            field=models.ForeignKey(default=gpus.models.settings_cluster_pk, on_delete=django.db.models.deletion.CASCADE, related_name='agent_tokens', to='gpus.cluster'),
        ),
    ]
