# Indexes of the retention purge (tool_calling.retention): ended runs by when they ended,
# run events by age.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tool_calling', '0015_request_history'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='run',
            index=models.Index(fields=['status', 'finished_at'], name='tc_run_status_finished'),
        ),
        migrations.AddIndex(
            model_name='runevent',
            index=models.Index(fields=['created_at'], name='tc_runevent_created'),
        ),
    ]
