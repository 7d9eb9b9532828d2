"""Node pools: each node's pool (from its provider's pool label) and the taints an admin declares GPU work should
tolerate in a pool. Forward-safe: a new column with a default and a new table; the pool of the nodes already
known is filled from the labels they carry (reconcile keeps it current from then on)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


#: The pool labels as vocab.taints.POOL_LABELS had them when this migration was written (GKE, EKS, AKS, old AKS).
POOL_LABELS = ("cloud.google.com/gke-nodepool", "eks.amazonaws.com/nodegroup", "kubernetes.azure.com/agentpool",
               "agentpool")  # fmt: skip


def fill_pools(apps, schema_editor):
    Node = apps.get_model("gpus", "Node")
    changed = []
    for node in Node.objects.only("id", "labels", "pool").iterator():
        labels = node.labels or {}
        pool = next((str(labels[key]) for key in POOL_LABELS if labels.get(key)), "")
        if pool != node.pool:
            node.pool = pool
            changed.append(node)
    Node.objects.bulk_update(changed, ["pool"], batch_size=500)


class Migration(migrations.Migration):

    dependencies = [
        ('gpus', '0008_node_operations_trust'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='node',
            name='pool',
            field=models.CharField(blank=True, db_index=True, max_length=253),
        ),
        migrations.CreateModel(
            name='NodePool',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(blank=True, max_length=253, unique=True)),
                ('declared_taints', models.JSONField(blank=True, default=list)),
                ('updated', models.DateTimeField(auto_now=True)),
                ('updated_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['name'],
            },
        ),
        migrations.RunPython(fill_pools, migrations.RunPython.noop),
    ]
