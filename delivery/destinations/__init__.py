"""Where greetings go: the destinations an operator configures, whom each greets (its audience),
and the reads of them and their endpoints."""
