from django.core.management.base import BaseCommand, CommandError

from scheduling.selectors import events_zone_data
from scheduling.services.zone_rules import events_follow_zone_data
from scheduling.zonedata import zone_data


class Command(BaseCommand):
    help = (
        "Move every PENDING event to the rules of this host's time zone data now, and wait until all follow "
        "them (a running scheduler does the same by itself within a turn). With --check, only say whether they "
        "already do: exit 1 if not, so a deploy can wait for it or stop."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--check",
            action="store_true",
            help="Change nothing; exit 1 unless every PENDING event follows this data.",
        )

    def handle(self, *args, check, **options):
        data = zone_data()
        if data.version is None:
            raise CommandError(
                f"The time zone data in {data.path} does not say its version: nothing can be compared."
            )
        self.stdout.write(f"This host computes with time zone data {data.version} ({data.path}).")
        if check:
            events = events_zone_data()
            if events.version != data.version:
                moving = f", being moved to {events.pass_version}" if events.pass_version else ""
                raise CommandError(
                    f"The PENDING events follow {events.version or 'data not yet known'}{moving}, "
                    f"not {data.version}."
                )
            self.stdout.write(f"Every PENDING event follows {data.version}.")
            return
        result = events_follow_zone_data(seconds=None)
        events = events_zone_data()
        if events.version != data.version:
            raise CommandError(
                f"The PENDING events follow {events.pass_version or events.version}, newer than this host's "
                f"{data.version}: rules only go forward. Upgrade this host's tzdata (or run this where it is newer)."
            )
        moved = sum(result.moved.values())
        by_zone = "".join(f"\n  {zone}: {count:,}" for zone, count in result.moved.most_common())
        self.stdout.write(f"Every PENDING event follows {data.version}; {moved:,} moved now.{by_zone}")
