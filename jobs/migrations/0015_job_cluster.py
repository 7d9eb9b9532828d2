"""Jobs name their cluster: every job that was ever placed ran on the cluster configured in settings (gpus.0011 made
it the row ``default``), so those rows get it; jobs never placed get none (admission chooses)."""

import django.db.models.deletion
from django.db import migrations, models


def placed_jobs_ran_on_the_settings_cluster(apps, schema_editor):
    Cluster = apps.get_model("gpus", "Cluster")
    Job = apps.get_model("jobs", "Job")
    cluster = Cluster.objects.filter(name="default").first()
    if cluster is not None:
        Job.objects.exclude(node_name="").update(cluster=cluster)


class Migration(migrations.Migration):

    dependencies = [
        ('gpus', '0011_fleet_clusters'),
        ('jobs', '0014_wait_reason_class_gone'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='cluster',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='jobs', to='gpus.cluster'),
        ),
        migrations.AddField(
            model_name='job',
            name='clusters',
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.RunPython(placed_jobs_ran_on_the_settings_cluster, migrations.RunPython.noop),
    ]
