"""An operator's actions on what was sent: resend, recover a window, acknowledge or resend a failure
group, and the test message."""
