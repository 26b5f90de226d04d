"""How a request reaches a receiver: the HTTP transport, Standard Webhooks signing, the resolver and
the addresses the worker may reach (SSRF), a destination's settings as a request needs them."""
