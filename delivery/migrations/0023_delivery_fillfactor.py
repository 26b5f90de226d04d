"""Free space on the deliveries' pages, so that a delivery's claim and record write their new row versions on its own page.

Every move of a delivery is a non-HOT update (its status is in an index), and PostgreSQL
logs such an update in full when the new version goes to another page, but only what
changed beside the old version when it stays on the same one: with the pages of the
table packed full (fillfactor 100, the default), the claim's and the record's versions
went elsewhere. Measured (bench/results/REPORT-writes.md, 20,000 queued, one worker): 3,437
WAL bytes per delivery at 100, 2,961 at 70, 2,633 at 50. 70 keeps most of the gain for
less room: the free third of a page stays empty once its rows are history (inserts fill
a page only up to the fillfactor), so the table is about 40 % larger, where 50 doubles it.
Only pages written from now on are kept this full; nothing is rewritten.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("delivery", "0022_delivery_success_on_the_delivery")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE delivery_delivery SET (fillfactor = 70)",
            reverse_sql="ALTER TABLE delivery_delivery RESET (fillfactor)",
        )
    ]
