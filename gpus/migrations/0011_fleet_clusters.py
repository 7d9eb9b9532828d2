"""The fleet: clusters become rows, and every node belongs to one.

Forward-safe on a single-cluster install: the cluster configured in settings becomes the row ``default`` (connection
``settings``), every existing node is put in it, and node names become unique per cluster instead of overall."""

import django.db.models.deletion
import gpus.models
from django.db import migrations, models


def settings_cluster_holds_every_node(apps, schema_editor):
    Cluster = apps.get_model("gpus", "Cluster")
    Node = apps.get_model("gpus", "Node")
    cluster, _ = Cluster.objects.get_or_create(
        name="default", defaults={"display_name": "Default cluster", "connection": "settings"}
    )
    Node.objects.filter(cluster__isnull=True).update(cluster=cluster)


class Migration(migrations.Migration):

    dependencies = [
        ('gpus', '0010_model_names_in_english'),
        ('portal', '0010_move_plumbing_to_core'),
    ]

    operations = [
        migrations.CreateModel(
            name='Cluster',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.SlugField(help_text='Lower-case letters, digits and hyphens.', max_length=63, unique=True)),
                ('display_name', models.CharField(blank=True, max_length=100)),
                ('region', models.CharField(blank=True, max_length=64)),
                ('labels', models.JSONField(blank=True, default=dict)),
                ('connection', models.CharField(choices=[('settings', 'Configured in settings'), ('simulated', 'Simulated (embedded)'), ('in_cluster', 'In-cluster service account'), ('kubeconfig', 'Kubeconfig context'), ('token', 'API server URL, CA and token')], max_length=12)),
                ('kubeconfig_path', models.CharField(blank=True, max_length=500)),
                ('kube_context', models.CharField(blank=True, max_length=200)),
                ('server', models.URLField(blank=True, max_length=500)),
                ('ca_certificate', models.TextField(blank=True)),
                ('token_sealed', models.TextField(blank=True)),
                ('sim_scenario', models.CharField(blank=True, max_length=500)),
                ('health', models.CharField(choices=[('unknown', 'Not checked yet'), ('reachable', 'Reachable'), ('unreachable', 'Unreachable')], default='unknown', max_length=12)),
                ('capabilities', models.JSONField(blank=True, default=dict)),
                ('server_version', models.CharField(blank=True, max_length=64)),
                ('last_error', models.TextField(blank=True)),
                ('unreachable_since', models.DateTimeField(blank=True, null=True)),
                ('last_checked_at', models.DateTimeField(blank=True, null=True)),
                ('last_sync_at', models.DateTimeField(blank=True, null=True)),
                ('class_totals', models.JSONField(blank=True, default=dict)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'ordering': ['name'],
            },
        ),
        migrations.AlterField(
            model_name='node',
            name='name',
            field=models.CharField(max_length=253),
        ),
        migrations.AddField(
            model_name='node',
            name='cluster',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT, related_name='nodes', to='gpus.cluster'),
        ),
        migrations.RunPython(settings_cluster_holds_every_node, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='node',
            name='cluster',
            field=models.ForeignKey(default=gpus.models.settings_cluster_pk, on_delete=django.db.models.deletion.PROTECT, related_name='nodes', to='gpus.cluster'),
        ),
        migrations.AddConstraint(
            model_name='node',
            constraint=models.UniqueConstraint(fields=('cluster', 'name'), name='unique_node_name_per_cluster'),
        ),
    ]
