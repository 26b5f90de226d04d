from django.db import models


class ProcessKind(models.TextChoices):
    SCHEDULER = "scheduler", "Scheduler"
    WORKER = "worker", "Worker"


class ProcessHeartbeat(models.Model):
    """One row per running scheduler or worker process, refreshed every few seconds."""

    Kind = ProcessKind
    # Silent for longer than this, a process is shown as lost.
    LOST_AFTER_SECONDS = 60

    id = models.BigAutoField(primary_key=True)
    kind = models.CharField(max_length=16, choices=ProcessKind.choices)
    name = models.CharField(max_length=200, unique=True, help_text="host:pid:random")
    host = models.CharField(max_length=200)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)
    # Work done since start: events claimed (scheduler) or deliveries sent (worker).
    processed = models.PositiveBigIntegerField(default=0)
    succeeded = models.PositiveBigIntegerField(default=0)
    failed = models.PositiveBigIntegerField(default=0)
    # The IANA version of the time zone database the process computes with
    # ("2025b"): a host whose tzdata was not upgraded with the others shows here.
    zone_data = models.CharField(max_length=32, blank=True, default="", db_default="")

    # Not a column: how long it has been silent, set on the rows the console's dashboard lists.
    silent_for: str

    class Meta:
        ordering = ["-last_seen_at"]
        indexes = [models.Index(fields=["last_seen_at"], name="process_last_seen_idx")]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"
