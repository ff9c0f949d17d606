"""Runs moto's S3 server with each writing request applied as one step.

moto checks a PUT's If-Match / If-None-Match and then stores the object as two
separate steps, on a threaded server, so two racing conditional writes can both
succeed. S3 (and MinIO, R2, GCS) make the check and the write one atomic step,
and profiledb's bucket index relies on exactly that: it is changed only by
conditional writes. This launcher keeps moto's own command line and server and
wraps its application so that requests other than reads hold one lock.

With `--journal FILE`, the bucket survives a restart of the server (kill -9
included), as a real store's does: every writing request moto accepted is
appended to FILE and fsynced before its answer goes out, and a server started
on an existing FILE first replays it, in order, through moto itself.
"""

import base64
import io
import json
import os
import sys
import threading

import moto.server as server
from werkzeug.test import EnvironBuilder

# Threads switch as often as Python allows, so that any check-then-act race left
# in the test server shows up in tests instead of once in a hundred CI runs
# (bucket.rs `racing_conditional_puts_admit_exactly_one` fails about one run in
# three with this setting and the lock removed). Measured: no change in the
# cluster tests' time.
sys.setswitchinterval(1e-6)

_READS = {"GET", "HEAD", "OPTIONS"}
_write = threading.Lock()


_journal_path = None
_journal = None


def _record(environ, body):
    headers = {
        k: v
        for k, v in environ.items()
        if k.startswith("HTTP_") or k in ("CONTENT_TYPE", "CONTENT_LENGTH")
    }
    line = json.dumps(
        {
            "method": environ["REQUEST_METHOD"],
            "path": environ.get("PATH_INFO", "/"),
            "query": environ.get("QUERY_STRING", ""),
            "headers": headers,
            "body": base64.b64encode(body).decode(),
        }
    )
    _journal.write(line + "\n")
    _journal.flush()
    os.fsync(_journal.fileno())


def _replay(app):
    if not os.path.exists(_journal_path):
        return
    with open(_journal_path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                # A torn last line: its request was never answered.
                break
            headers = {
                k[5:].replace("_", "-"): v
                for k, v in r["headers"].items()
                if k.startswith("HTTP_")
            }
            environ = EnvironBuilder(
                method=r["method"],
                path=r["path"],
                query_string=r["query"],
                headers=headers,
                content_type=r["headers"].get("CONTENT_TYPE"),
                data=base64.b64decode(r["body"]),
            ).get_environ()
            list(app(environ, lambda status, headers, exc_info=None: None))


def _serialized(app):
    def call(environ, start_response):
        if environ.get("REQUEST_METHOD") in _READS:
            return app(environ, start_response)
        with _write:
            body = b""
            if _journal is not None:
                length = int(environ.get("CONTENT_LENGTH") or 0)
                body = environ["wsgi.input"].read(length) if length else b""
                environ["wsgi.input"] = io.BytesIO(body)
            status = []

            def started(s, headers, exc_info=None):
                status.append(s)
                return start_response(s, headers, exc_info)

            # The whole response is produced inside the lock: moto may apply
            # a change while its body is iterated.
            out = list(app(environ, started))
            if _journal is not None and status and status[0][:1] == "2":
                _record(environ, body)
            return out

    return call


_run_simple = server.run_simple


def _run(host, port, app, **kwargs):
    global _journal
    if _journal_path is not None:
        _replay(app)
        _journal = open(_journal_path, "a")
    _run_simple(host, port, _serialized(app), **kwargs)


args = sys.argv[1:]
if "--journal" in args:
    i = args.index("--journal")
    _journal_path = args[i + 1]
    del args[i : i + 2]
server.run_simple = _run
server.main(args)
