"""Runs moto's S3 server with each writing request applied as one step.

moto checks a PUT's If-Match / If-None-Match and then stores the object as two
separate steps, on a threaded server, so two racing conditional writes can both
succeed. S3 (and MinIO, R2, GCS) make the check and the write one atomic step,
and profiledb's bucket index relies on exactly that: it is changed only by
compare-and-swap. This launcher keeps moto's own command line and server and
wraps its application so that requests other than reads hold one lock.
"""

import sys
import threading

import moto.server as server

# Threads switch as often as Python allows, so that any check-then-act race left
# in the test server shows up in tests instead of once in a hundred CI runs
# (bucket.rs `racing_conditional_puts_admit_exactly_one` fails about one run in
# three with this setting and the lock removed). Measured: no change in the
# cluster tests' time.
sys.setswitchinterval(1e-6)

_READS = {"GET", "HEAD", "OPTIONS"}
_write = threading.Lock()


def _serialized(app):
    def call(environ, start_response):
        if environ.get("REQUEST_METHOD") in _READS:
            return app(environ, start_response)
        with _write:
            # The whole response is produced inside the lock: moto may apply
            # a change while its body is iterated.
            return list(app(environ, start_response))

    return call


_run_simple = server.run_simple


def _run(host, port, app, **kwargs):
    _run_simple(host, port, _serialized(app), **kwargs)


server.run_simple = _run
server.main(sys.argv[1:])
