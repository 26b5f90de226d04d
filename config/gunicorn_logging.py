"""gunicorn's access log without calendar feed tokens: `--logger-class config.gunicorn_logging.AccessLogger`.

A feed's token is in its URL's path (delivery.upcoming.feeds), which the access log would write
whole; every atom that holds the path, the request line or the referrer is written redacted.
"""

from gunicorn.glogging import Logger

from config.logging import redact_paths

_ATOMS_WITH_PATHS = ("r", "U", "f")


class AccessLogger(Logger):
    def atoms(self, resp, req, environ, request_time):
        atoms = super().atoms(resp, req, environ, request_time)
        for name in _ATOMS_WITH_PATHS:
            if isinstance(atoms.get(name), str):
                atoms[name] = redact_paths(atoms[name])
        return atoms
