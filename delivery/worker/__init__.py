"""The worker process: its loop, the claim of due deliveries under a lease, the lanes that pace each
receiver, the requests in flight, and the record of their answers. `run_worker` starts it."""
