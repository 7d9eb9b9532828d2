"""Telemetry samples and rollups stop being tied to jobs by a database constraint: the column ``job_id``
stays with its values and index; the jobs layer fills it (see telemetry.attribution)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('gpus', '0004_rollupwatermark_nodeagenttoken_gpurollup_gpusample'),
        ('jobs', '0003_notebooks'),
    ]

    operations = [
        migrations.AlterField(
            model_name='gpusample',
            name='job',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='jobs.job'),
        ),
        migrations.AlterField(
            model_name='gpurollup',
            name='job',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='jobs.job'),
        ),
    ]
