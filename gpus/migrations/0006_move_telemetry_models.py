"""GpuSample, GpuRollup, RollupWatermark and NodeAgentToken now belong to the telemetry app. Only Django's
model state moves (telemetry.0001_initial takes them over); the tables, their rows and indexes stay as they are."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('gpus', '0005_telemetry_job_without_constraint'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='GpuSample'),
                migrations.DeleteModel(name='GpuRollup'),
                migrations.DeleteModel(name='RollupWatermark'),
                migrations.DeleteModel(name='NodeAgentToken'),
            ],
            database_operations=[],
        ),
    ]
