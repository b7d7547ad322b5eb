"""A Confluent Schema Registry on loopback, and a small client for it.

The local event source mapping's registry integration (``embedded/esm/registry.py``) needs a real
registry endpoint to read writer schemas from, as the Lambda mapping reads them from Confluent
Cloud or a self-hosted registry. ``LocalSchemaRegistry`` serves the subset of Confluent's REST API
v1 that producers and that integration use, with Confluent's status codes and ``error_code``\\ s:

=====================================================  ================================================
``POST /subjects/{subject}/versions``                  register ``{"schema", "schemaType"?}``: ``{"id"}``
``GET /schemas/ids/{id}``                              ``{"schema"}`` (and ``schemaType`` unless Avro)
``GET /subjects``                                      the subjects' names
``GET /subjects/{subject}/versions``                   the subject's version numbers
``GET /subjects/{subject}/versions/{latest|n}``        ``{"subject", "version", "id", "schema"}``
=====================================================  ================================================

Ids are global and start at 1; registering a schema the registry already holds (under any
subject) returns its id, and under the same subject adds no version. Avro schemas are checked
with ``fastavro.parse_schema`` (422, ``42201`` if invalid) and kept in a compact form, so the
same schema spelled with other whitespace is the same schema; Protobuf and JSON Schema texts are
kept as given (``JSON`` must parse as JSON). Errors: 404 ``40401`` subject not found, ``40402``
version not found, ``40403`` schema not found; 401 without the right HTTP basic credentials
when the registry was started with them. Compatibility rules, references, deletes and modes are
not served: nothing here needs them.

The server is stdlib ``ThreadingHTTPServer`` on 127.0.0.1 (a free port unless one is given);
leaving the context stops it and joins every thread it started. The client uses ``urllib``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

from tidemark.embedded.ports import LOOPBACK
from tidemark.exceptions import TidemarkError

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
AVRO, PROTOBUF, JSON_SCHEMA = "AVRO", "PROTOBUF", "JSON"
SCHEMA_TYPES = (AVRO, PROTOBUF, JSON_SCHEMA)
# Confluent's error codes
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
INVALID_SCHEMA = 42201
UNAUTHORIZED = 401


class SchemaRegistryError(TidemarkError):
    """The schema registry refused a request or cannot be reached. ``status`` is the HTTP status
    (0: no answer), ``error_code`` Confluent's code from the response body (0: none)."""

    def __init__(self, message: str, *, status: int = 0, error_code: int = 0) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code


class SchemaRegistryAuthError(SchemaRegistryError):
    """The registry wants other credentials (HTTP 401)."""


class SchemaNotFoundError(SchemaRegistryError):
    """No schema has this id (40403), or the subject or version is unknown (40401, 40402)."""


class InvalidSchemaError(SchemaRegistryError):
    """The registry refused a schema it cannot parse (422, 42201)."""


class RegisteredSchema(NamedTuple):
    schema: str
    schema_type: str = AVRO


# -- the server -------------------------------------------------------------------------------


class _Refused(Exception):
    """A request the registry answers with an error body."""

    def __init__(self, status: HTTPStatus, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code


def canonical(schema: str, schema_type: str) -> str:
    """The form the registry keeps and compares: Avro and JSON Schema as compact JSON (key order
    kept), Avro checked with fastavro; Protobuf as given. ``_Refused`` (422) if it does not parse."""
    if schema_type == PROTOBUF:
        return schema
    try:
        parsed = json.loads(schema)
    except ValueError as exc:
        raise _Refused(HTTPStatus.UNPROCESSABLE_ENTITY, INVALID_SCHEMA, f"Invalid schema: not JSON ({exc})") from None
    if schema_type == AVRO:
        import fastavro

        try:
            fastavro.parse_schema(parsed)
        except Exception as exc:  # noqa: BLE001 -- fastavro raises several unrelated types for bad schemas
            raise _Refused(
                HTTPStatus.UNPROCESSABLE_ENTITY, INVALID_SCHEMA, f"Invalid schema: {type(exc).__name__}: {exc}"
            ) from None
    return json.dumps(parsed, separators=(",", ":"))


@dataclass
class _Store:
    """Every schema by id, and each subject's versions (lists of ids). One lock for all."""

    schemas: dict[int, RegisteredSchema] = field(default_factory=dict)
    ids: dict[RegisteredSchema, int] = field(default_factory=dict)
    subjects: dict[str, list[int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def register(self, subject: str, schema: str, schema_type: str) -> int:
        registered = RegisteredSchema(canonical(schema, schema_type), schema_type)
        with self.lock:
            schema_id = self.ids.get(registered)
            if schema_id is None:
                schema_id = len(self.schemas) + 1
                self.schemas[schema_id] = registered
                self.ids[registered] = schema_id
            versions = self.subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return schema_id

    def schema(self, schema_id: int) -> RegisteredSchema:
        with self.lock:
            found = self.schemas.get(schema_id)
        if found is None:
            raise _Refused(HTTPStatus.NOT_FOUND, SCHEMA_NOT_FOUND, f"Schema {schema_id} not found")
        return found

    def versions(self, subject: str) -> list[int]:
        with self.lock:
            versions = self.subjects.get(subject)
            if versions is None:
                raise _Refused(HTTPStatus.NOT_FOUND, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
            return list(versions)


def _body(registered: RegisteredSchema) -> dict[str, Any]:
    body: dict[str, Any] = {"schema": registered.schema}
    if registered.schema_type != AVRO:
        body["schemaType"] = registered.schema_type
    return body


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 10  # seconds a connection may sit idle: a stuck client cannot hold a thread forever
    error_content_type = CONTENT_TYPE

    def log_message(self, format: str, *args: Any) -> None:  # the stdlib's signature
        return None  # no access log on stderr

    def do_GET(self) -> None:
        self._answer("GET")

    def do_POST(self) -> None:
        self._answer("POST")

    def do_PUT(self) -> None:
        self._answer("PUT")

    def do_DELETE(self) -> None:
        self._answer("DELETE")

    def _answer(self, method: str) -> None:
        try:
            self._authorise()
            status, body = self._route(method, urllib.parse.urlsplit(self.path).path)
        except _Refused as refused:
            status, body = refused.status, {"error_code": int(refused.error_code), "message": str(refused)}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        if status == HTTPStatus.UNAUTHORIZED:
            self.send_header("WWW-Authenticate", 'Basic realm="schema-registry"')
        self.end_headers()
        self.wfile.write(data)

    def _authorise(self) -> None:
        expected = self.server.credentials
        if expected is None:
            return
        given = self.headers.get("Authorization", "")
        scheme, _, token = given.partition(" ")
        try:
            user, _, password = base64.b64decode(token, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            user = password = ""
        ok = scheme.lower() == "basic" and hmac.compare_digest(f"{user}:{password}", ":".join(expected))
        if not ok:
            raise _Refused(HTTPStatus.UNAUTHORIZED, UNAUTHORIZED, "Unauthorized")

    def _request(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise _Refused(HTTPStatus.BAD_REQUEST, HTTPStatus.BAD_REQUEST, "the request body must be a JSON object")
        return body

    def _route(self, method: str, path: str) -> tuple[HTTPStatus, Any]:
        parts = [urllib.parse.unquote(part) for part in path.strip("/").split("/")]
        allowed = "POST" if parts[:1] == ["subjects"] and parts[2:] == ["versions"] else "GET"
        known = (
            parts == ["subjects"]
            or (len(parts) == 3 and parts[:2] == ["schemas", "ids"])
            or (len(parts) in (3, 4) and parts[0] == "subjects" and parts[2] == "versions")
        )
        if not known:
            raise _Refused(HTTPStatus.NOT_FOUND, HTTPStatus.NOT_FOUND, "HTTP 404 Not Found")
        if method != allowed and not (method == "GET" and len(parts) == 3 and parts[0] == "subjects"):
            raise _Refused(HTTPStatus.METHOD_NOT_ALLOWED, HTTPStatus.METHOD_NOT_ALLOWED, "HTTP 405 Method Not Allowed")
        store = self.server.store
        if parts == ["subjects"]:
            with store.lock:
                return HTTPStatus.OK, sorted(store.subjects)
        if parts[0] == "schemas":
            wanted = parts[2]
            if not wanted.isdigit():
                raise _Refused(HTTPStatus.NOT_FOUND, SCHEMA_NOT_FOUND, f"Schema {wanted} not found")
            return HTTPStatus.OK, _body(store.schema(int(wanted)))
        subject = parts[1]
        if method == "POST":
            request = self._request()
            schema, schema_type = request.get("schema"), request.get("schemaType", AVRO)
            if not isinstance(schema, str) or schema_type not in SCHEMA_TYPES:
                raise _Refused(
                    HTTPStatus.UNPROCESSABLE_ENTITY,
                    INVALID_SCHEMA,
                    f"Invalid schema: 'schema' must be a string and 'schemaType' one of {', '.join(SCHEMA_TYPES)}",
                )
            return HTTPStatus.OK, {"id": store.register(subject, schema, schema_type)}
        versions = store.versions(subject)
        if len(parts) == 3:
            return HTTPStatus.OK, list(range(1, len(versions) + 1))
        version = parts[3]
        number = len(versions) if version in ("latest", "-1") else int(version) if version.isdigit() else 0
        if not 1 <= number <= len(versions):
            raise _Refused(HTTPStatus.NOT_FOUND, VERSION_NOT_FOUND, f"Version {version} not found.")
        schema_id = versions[number - 1]
        head = {"subject": subject, "version": number, "id": schema_id}
        return HTTPStatus.OK, {**head, **_body(store.schema(schema_id))}


class _Server(ThreadingHTTPServer):
    # Request threads are joined when the server closes (rather than left as daemons).
    daemon_threads = False
    block_on_close = True

    def __init__(self, address: tuple[str, int], credentials: tuple[str, str] | None) -> None:
        super().__init__(address, _Handler)
        self.store = _Store()
        self.credentials = credentials


class LocalSchemaRegistry:
    """A Confluent-compatible registry on loopback for the length of a ``with`` block.

    ``credentials`` (username, password): every request must carry them as HTTP basic auth.
    ``port`` 0 binds a free one; ``url`` is where it listens once started."""

    def __init__(self, *, host: str = LOOPBACK, port: int = 0, credentials: tuple[str, str] | None = None) -> None:
        self._address = (host, port)
        self._credentials = credentials
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise SchemaRegistryError("the local schema registry is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> LocalSchemaRegistry:
        try:
            self._server = _Server(self._address, self._credentials)
        except OSError as exc:
            raise SchemaRegistryError(f"cannot start the local schema registry on {self._address}: {exc}") from None
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="schema-registry"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close the socket and join the serving thread and every request thread."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join()

    def client(self) -> SchemaRegistryClient:
        username, password = self._credentials or (None, None)
        return SchemaRegistryClient(self.url, username=username, password=password)

    def __enter__(self) -> LocalSchemaRegistry:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


@contextlib.contextmanager
def local_schema_registry(
    *, host: str = LOOPBACK, port: int = 0, credentials: tuple[str, str] | None = None
) -> Iterator[LocalSchemaRegistry]:
    """``LocalSchemaRegistry`` as a context manager function (for ``ExitStack.enter_context``)."""
    with LocalSchemaRegistry(host=host, port=port, credentials=credentials) as registry:
        yield registry


# -- the client -------------------------------------------------------------------------------


class SchemaRegistryClient:
    """What producers and the mapping's registry integration ask a Confluent registry.

    Schemas are immutable once registered, so ``fetch``/``schema_of`` cache them by id."""

    def __init__(
        self, url: str, *, username: str | None = None, password: str | None = None, timeout_s: float = 10.0
    ) -> None:
        self.url = url.rstrip("/")
        self._timeout_s = timeout_s
        self._auth = None
        if username is not None:
            token = base64.b64encode(f"{username}:{password or ''}".encode()).decode("ascii")
            self._auth = f"Basic {token}"
        self._cache: dict[int, RegisteredSchema] = {}
        self._lock = threading.Lock()

    def register(self, subject: str, schema: str | Mapping[str, Any], schema_type: str = AVRO) -> int:
        """Register ``schema`` under ``subject``; its global id (the same id for a known schema)."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        body: dict[str, Any] = {"schema": text}
        if schema_type != AVRO:
            body["schemaType"] = schema_type
        answer = self._call("POST", f"/subjects/{_quote(subject)}/versions", body)
        return int(answer["id"])

    def fetch(self, schema_id: int) -> RegisteredSchema:
        """The schema registered with ``schema_id`` and its type (``SchemaNotFoundError``)."""
        with self._lock:
            cached = self._cache.get(schema_id)
        if cached is not None:
            return cached
        answer = self._call("GET", f"/schemas/ids/{schema_id}")
        found = RegisteredSchema(str(answer["schema"]), str(answer.get("schemaType", AVRO)))
        with self._lock:
            self._cache[schema_id] = found
        return found

    def schema_of(self, schema_id: int) -> str:
        """The schema text registered with ``schema_id``."""
        return self.fetch(schema_id).schema

    def subjects(self) -> list[str]:
        return [str(name) for name in self._call("GET", "/subjects")]

    def versions(self, subject: str) -> list[int]:
        return [int(number) for number in self._call("GET", f"/subjects/{_quote(subject)}/versions")]

    def latest(self, subject: str) -> dict[str, Any]:
        answer: dict[str, Any] = self._call("GET", f"/subjects/{_quote(subject)}/versions/latest")
        return answer

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        request = urllib.request.Request(
            self.url + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Accept": CONTENT_TYPE, **({"Content-Type": CONTENT_TYPE} if body is not None else {})},
        )
        if self._auth is not None:
            request.add_header("Authorization", self._auth)
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise _error(method, path, exc) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SchemaRegistryError(f"schema registry at {self.url} unreachable: {reason}") from None


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _error(method: str, path: str, exc: urllib.error.HTTPError) -> SchemaRegistryError:
    """The typed error of a refused request, from its status and Confluent's error body."""
    try:
        body = json.loads(exc.read())
        code, message = int(body.get("error_code", 0)), str(body.get("message", ""))
    except (ValueError, TypeError, AttributeError, OSError):
        code, message = 0, ""
    text = f"schema registry refused {method} {path}: HTTP {exc.code}" + (f" {code} {message}" if code else "")
    kind: type[SchemaRegistryError] = SchemaRegistryError
    if exc.code == HTTPStatus.UNAUTHORIZED:
        kind = SchemaRegistryAuthError
    elif code in (SUBJECT_NOT_FOUND, VERSION_NOT_FOUND, SCHEMA_NOT_FOUND):
        kind = SchemaNotFoundError
    elif code == INVALID_SCHEMA:
        kind = InvalidSchemaError
    return kind(text, status=exc.code, error_code=code)
