# The index of the retention purge (tool_calling.retention): ended runs, oldest first.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tool_calling", "0018_tool_presentation"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["finished_at"], name="tc_run_finished"),
        ),
    ]
