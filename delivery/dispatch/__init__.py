"""The scheduler process: due events become queued deliveries (the claim), daily digests are built,
old history is pruned. `run_scheduler` starts it."""
