""":class:`~.object_store.ObjectStore` over boto3's botocore, for AWS S3 and S3-compatible stores.

Every boto3/botocore exception is translated in one place, :func:`translate_boto_error`;
nothing from botocore escapes an :class:`S3ObjectStore` method. Files go up in one PUT or
as a multipart upload (parts retried, the upload aborted on failure) and come down into
a temporary file renamed into place; :meth:`S3ObjectStore.open_stream` reads a byte
range as a stream that resumes after failed reads.

The client is made by a botocore session, not a ``boto3.session.Session``: the store uses
no boto3 resource, transfer manager or docstring machinery, and ``import boto3`` loads
them (s3transfer, multiprocessing, boto3.docs and boto3.resources: about 3 MiB of an idle
agent's 50 MiB USS). The credential chain, the configuration files and environment, the
endpoint resolution and the signing are botocore's either way.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
import io
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import botocore.session
from botocore import exceptions as bx
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from .errors import ConfigError, ObjectNotFound, PreconditionFailed, StorageError
from .object_store import (
    DEFAULT_CONTENT_TYPE,
    MIB,
    ObjectInfo,
    PendingUpload,
    StoredObject,
    check_conditions,
    check_expiry,
    check_key,
    read_parts,
    write_file_atomically,
)
from .presign import Credentials, PresignTemplate, is_plain_key, presign_get
from .s3_config import S3Config

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

MAX_PARTS = 10_000
_DELETE_BATCH = 1000
_COPY_CHUNK = 1 * MIB


_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound", "NoSuchUpload"})
_PRECONDITION_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})


def translate_boto_error(exc: BaseException, *, config: S3Config, key: str | None) -> StorageError:
    """Map a botocore/boto3 exception to the project's StorageError family.

    NoSuchKey/404 → ObjectNotFound; NoSuchBucket → ObjectNotFound naming the bucket;
    PreconditionFailed/412 and ConditionalRequestConflict/409 → PreconditionFailed;
    connection failures and timeouts → StorageError("cannot reach S3 endpoint ...");
    anything else → StorageError with the service's code and message.
    """
    where = f"{config.url}/{key}" if key else config.url
    endpoint = config.endpoint_url or "AWS S3 (default endpoint)"
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        message = error.get("Message", "") or str(exc)
        if code == "NoSuchBucket":
            return ObjectNotFound(f"bucket {config.bucket!r} does not exist at {endpoint}")
        if code in _NOT_FOUND_CODES or status == 404:
            return ObjectNotFound(f"{where} not found")
        if code in _PRECONDITION_CODES or status in (409, 412):
            return PreconditionFailed(f"conditional write to {where} failed: {message}")
        return StorageError(f"S3 request for {where} failed: {code or status}: {message}")
    if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError):
        return StorageError(f"no usable AWS credentials for {config.url}: {exc}")
    if isinstance(
        exc,
        bx.EndpointConnectionError
        | bx.ConnectTimeoutError
        | bx.ReadTimeoutError
        | bx.ConnectionClosedError
        | bx.ConnectionError
        | bx.HTTPClientError,
    ):
        return StorageError(f"cannot reach S3 endpoint {endpoint} for {where}: {exc}")
    if isinstance(exc, bx.ProfileNotFound):
        return StorageError(f"AWS profile not found: {exc}")
    return StorageError(f"S3 request for {where} failed: {type(exc).__name__}: {exc}")


def _is_not_modified(exc: BaseException) -> bool:
    if not isinstance(exc, ClientError):
        return False
    code = exc.response.get("Error", {}).get("Code")
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in ("304", "NotModified") or status == 304


def _not_s3(config: S3Config, key: str | None, header: str) -> StorageError:
    """The error for an answer that lacks a header every S3 answer has: the endpoint is
    most likely not S3 (a web server answering 200 to anything)."""
    where = f"{config.url}/{key}" if key else config.url
    endpoint = config.endpoint_url or "AWS S3 (default endpoint)"
    return StorageError(
        f"the answer of {endpoint} for {where} has no {header}: is it an S3 endpoint?"
    )


def _etag_of(response: Mapping[str, object], config: S3Config, key: str | None) -> str:
    """The ETag of an S3 answer; StorageError (:func:`_not_s3`) when it has none."""
    etag = response.get("ETag")
    if not isinstance(etag, str) or not etag:
        raise _not_s3(config, key, "ETag")
    return etag


def _is_transient(err: StorageError) -> bool:
    return not isinstance(err, ObjectNotFound | PreconditionFailed)




def utc_now() -> dt.datetime:
    """The time URLs are signed at (aware, UTC)."""
    return dt.datetime.now(dt.timezone.utc)


PRESIGN_LESSONS = 3
"""botocore-presigned URLs a store tries to learn its URLs' form from (a refresh of the
credentials between botocore's signature and the check spoils one lesson)."""


class S3ObjectStore:
    """:class:`ObjectStore` over botocore, for AWS S3 and S3-compatible stores.

    One client is shared by all threads (botocore clients are thread-safe). Requests
    time out and retry within bounds set by :class:`S3Config`, so an unreachable endpoint
    fails with StorageError in bounded time instead of hanging.
    """

    def __init__(self, config: S3Config) -> None:
        self.config = config
        client_config = Config(
            connect_timeout=config.connect_timeout_s,
            read_timeout=config.read_timeout_s,
            retries={"max_attempts": config.max_attempts, "mode": "standard"},
            max_pool_connections=config.max_pool_connections,
            s3={"addressing_style": "path" if config.endpoint_url else "auto"},
            signature_version="s3v4",
            request_checksum_calculation=(
                "when_supported" if config.checksum_sha256 else "when_required"
            ),
            response_checksum_validation=(
                "when_supported" if config.checksum_sha256 else "when_required"
            ),
        )
        self._presign_template: PresignTemplate | None = None
        """How this store's presigned URLs look, learned from botocore's first one
        (:mod:`.presign`): later ones are signed without botocore."""
        self._presign_lessons = 0
        try:
            session = botocore.session.Session(profile=config.profile)
            self._credentials = session.get_credentials()
            self._client = cast("S3Client", session.create_client(
                "s3",
                endpoint_url=config.endpoint_url,
                region_name=config.region,
                config=client_config,
            ))
        except bx.ProfileNotFound as exc:
            raise ConfigError(f"AWS profile {config.profile!r} not found") from exc
        except (BotoCoreError, ValueError) as exc:
            raise ConfigError(f"cannot configure S3 client for {config.url}: {exc}") from exc

    def __repr__(self) -> str:
        return f"S3ObjectStore({self.config.url!r}, endpoint={self.config.endpoint_url!r})"

    @contextlib.contextmanager
    def _translated(self, key: str | None) -> Iterator[None]:
        try:
            yield
        except (BotoCoreError, ClientError) as exc:
            raise translate_boto_error(exc, config=self.config, key=key) from exc

    def _full(self, key: str) -> str:
        check_key(key)
        return f"{self.config.prefix}/{key}" if self.config.prefix else key

    def _relative(self, full_key: str) -> str:
        prefix = self.config.prefix
        return full_key[len(prefix) + 1 :] if prefix else full_key

    def _checksum_args(self) -> dict[str, Any]:
        return {"ChecksumAlgorithm": "SHA256"} if self.config.checksum_sha256 else {}

    def _bucket_exists(self) -> bool:
        try:
            self._client.head_bucket(Bucket=self.config.bucket)
        except ClientError as exc:
            if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                return False
            raise
        return True

    def _head(self, key: str) -> ObjectInfo | None:
        """HEAD the key; None when it is missing. S3 answers a HEAD with a bare 404 for a
        missing key and a missing bucket alike, so a 404 costs one HEAD on the bucket."""
        try:
            response = self._client.head_object(Bucket=self.config.bucket, Key=self._full(key))
        except (BotoCoreError, ClientError) as exc:
            err = translate_boto_error(exc, config=self.config, key=key)
            if not isinstance(err, ObjectNotFound):
                raise err from exc
            with self._translated(key):
                if self._bucket_exists():
                    return None
            raise ObjectNotFound(
                f"bucket {self.config.bucket!r} does not exist at "
                f"{self.config.endpoint_url or 'AWS S3'}"
            ) from exc
        size = response.get("ContentLength")
        if not isinstance(size, int):
            raise _not_s3(self.config, key, "Content-Length")
        return ObjectInfo(size=size, etag=_etag_of(response, self.config, key))

    def get(self, key: str, *, if_none_match: str | None = None) -> StoredObject | None:
        """See :meth:`ObjectStore.get`."""
        args: dict[str, Any] = {"Bucket": self.config.bucket, "Key": self._full(key)}
        if if_none_match is not None:
            args["IfNoneMatch"] = if_none_match
        try:
            response = self._client.get_object(**args)
            with contextlib.closing(response["Body"]) as body:
                data = body.read()
        except (BotoCoreError, ClientError) as exc:
            if _is_not_modified(exc):
                return None
            raise translate_boto_error(exc, config=self.config, key=key) from exc
        return StoredObject(data=data, etag=_etag_of(response, self.config, key))

    def put(
        self,
        key: str,
        data: bytes,
        *,
        if_none_match_any: bool = False,
        if_match: str | None = None,
        content_type: str = DEFAULT_CONTENT_TYPE,
    ) -> str:
        """See :meth:`ObjectStore.put`."""
        check_conditions(if_none_match_any, if_match)
        args: dict[str, Any] = {
            "Bucket": self.config.bucket,
            "Key": self._full(key),
            "Body": data,
            "ContentType": content_type,
            **self._checksum_args(),
        }
        if if_none_match_any:
            args["IfNoneMatch"] = "*"
        if if_match is not None:
            args["IfMatch"] = if_match
        with self._translated(key):
            response = self._client.put_object(**args)
        return _etag_of(response, self.config, key)

    def upload_file(
        self, key: str, path: Path, *, progress: Callable[[int], None] | None = None
    ) -> str:
        """See :meth:`ObjectStore.upload_file`. Parts are sent one at a time, in order."""
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise StorageError(f"cannot read {path} for upload: {exc.strerror or exc}") from exc
        if size <= self.config.part_size:
            data = b"".join(read_parts(path, self.config.part_size))
            etag = self.put(key, data)
            if progress is not None:
                progress(len(data))
            return etag
        part_size = max(self.config.part_size, -(-size // MAX_PARTS))
        full = self._full(key)
        bucket = self.config.bucket
        with self._translated(key):
            upload_id = self._client.create_multipart_upload(
                Bucket=bucket, Key=full, **self._checksum_args()
            )["UploadId"]
        try:
            parts: builtins.list[CompletedPartTypeDef] = []
            for number, chunk in enumerate(read_parts(path, part_size), start=1):
                parts.append(self._upload_part(key, upload_id, number, chunk))
                if progress is not None:
                    progress(len(chunk))
            with self._translated(key):
                completed = self._client.complete_multipart_upload(
                    Bucket=bucket,
                    Key=full,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                )
            return _etag_of(completed, self.config, key)
        except BaseException:
            self._abort(full, upload_id)
            raise

    def _upload_part(
        self, key: str, upload_id: str, number: int, chunk: bytes
    ) -> CompletedPartTypeDef:
        """Upload one part, retrying transient failures up to ``part_attempts`` times."""
        attempt = 1
        while True:
            try:
                with self._translated(key):
                    response = self._client.upload_part(
                        Bucket=self.config.bucket,
                        Key=self._full(key),
                        UploadId=upload_id,
                        PartNumber=number,
                        Body=chunk,
                        **self._checksum_args(),
                    )
            except StorageError as err:
                if attempt >= self.config.part_attempts or not _is_transient(err):
                    raise
                time.sleep(min(0.5 * 2 ** (attempt - 1), 5.0))
                attempt += 1
                continue
            part: CompletedPartTypeDef = {
                "PartNumber": number, "ETag": _etag_of(response, self.config, key)
            }
            if "ChecksumSHA256" in response:
                part["ChecksumSHA256"] = response["ChecksumSHA256"]
            return part

    def _abort(self, full_key: str, upload_id: str) -> None:
        """Abort a multipart upload, best effort: the original exception matters more."""
        with contextlib.suppress(BotoCoreError, ClientError):
            self._client.abort_multipart_upload(
                Bucket=self.config.bucket, Key=full_key, UploadId=upload_id
            )

    def download_file(self, key: str, path: Path) -> None:
        """See :meth:`ObjectStore.download_file`."""
        with self._translated(key):
            response = self._client.get_object(Bucket=self.config.bucket, Key=self._full(key))
            with contextlib.closing(response["Body"]) as body:
                write_file_atomically(path, iter(lambda: body.read(_COPY_CHUNK), b""),
                                      passthrough=(BotoCoreError,))

    def delete(self, keys: Sequence[str]) -> None:
        """See :meth:`ObjectStore.delete`. Sent in batches of 1000 keys."""
        full = [self._full(k) for k in keys]
        for start in range(0, len(full), _DELETE_BATCH):
            batch = full[start : start + _DELETE_BATCH]
            with self._translated(None):
                response = self._client.delete_objects(
                    Bucket=self.config.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            errors = [e for e in response.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                first = errors[0]
                raise StorageError(
                    f"could not delete {len(errors)} object(s) from {self.config.url}, "
                    f"first {first.get('Key')!r}: {first.get('Code')}: {first.get('Message')}"
                )

    def list(self, prefix: str = "") -> builtins.list[str]:
        """See :meth:`ObjectStore.list`."""
        base = self.config.prefix + "/" if self.config.prefix else ""
        keys: builtins.list[str] = []
        with self._translated(prefix or None):
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.config.bucket, Prefix=base + prefix):
                keys.extend(self._relative(obj["Key"]) for obj in page.get("Contents", []))
        return sorted(keys)

    def exists(self, key: str) -> bool:
        """See :meth:`ObjectStore.exists`."""
        return self._head(key) is not None

    def head(self, key: str) -> ObjectInfo:
        """See :meth:`ObjectStore.head`."""
        info = self._head(key)
        if info is None:
            raise ObjectNotFound(f"{self.config.url}/{key} not found")
        return info

    def presigned_get_url(self, key: str, expires_s: int) -> str:
        """See :meth:`ObjectStore.presigned_get_url`. Signed locally; no request is made.

        The first URLs are botocore's; once one has taught this store the form of its URLs
        (:meth:`~.presign.PresignTemplate.learn`, at most :data:`PRESIGN_LESSONS` tries),
        plain keys are signed by :func:`~.presign.presign_get`, to the same URL."""
        check_expiry(expires_s)
        full = self._full(key)
        template, credentials = self._presign_template, self._frozen_credentials()
        if template is not None and credentials is not None and is_plain_key(full):
            return presign_get(template, full, expires_s, credentials, utc_now())
        with self._translated(key):
            url = self._client.generate_presigned_url(
                "get_object", Params={"Bucket": self.config.bucket, "Key": full}, ExpiresIn=expires_s,
            )
        if template is None and credentials is not None and self._presign_lessons < PRESIGN_LESSONS:
            self._presign_lessons += 1
            self._presign_template = PresignTemplate.learn(url, full, credentials)
        return url

    def _frozen_credentials(self) -> Credentials | None:
        """The credentials botocore signs with now (refreshed when they expire); None when
        there are none (botocore then refuses, or signs nothing, as it does)."""
        if self._credentials is None:
            return None
        frozen = self._credentials.get_frozen_credentials()
        if frozen.access_key is None or frozen.secret_key is None:
            return None
        return Credentials(frozen.access_key, frozen.secret_key, frozen.token)

    def list_multipart_uploads(self, prefix: str = "") -> builtins.list[PendingUpload]:
        """See :meth:`ObjectStore.list_multipart_uploads`."""
        base = self.config.prefix + "/" if self.config.prefix else ""
        uploads: builtins.list[PendingUpload] = []
        with self._translated(prefix or None):
            paginator = self._client.get_paginator("list_multipart_uploads")
            for page in paginator.paginate(Bucket=self.config.bucket, Prefix=base + prefix):
                uploads.extend(
                    PendingUpload(
                        key=self._relative(upload["Key"]),
                        upload_id=upload["UploadId"],
                        initiated_at=upload["Initiated"].timestamp(),
                    )
                    for upload in page.get("Uploads", [])
                )
        return uploads

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        """See :meth:`ObjectStore.abort_multipart_upload`."""
        try:
            self._client.abort_multipart_upload(
                Bucket=self.config.bucket, Key=self._full(key), UploadId=upload_id
            )
        except (BotoCoreError, ClientError) as exc:
            if isinstance(exc, ClientError) and exc.response.get("Error", {}).get("Code") == "NoSuchUpload":
                return
            raise translate_boto_error(exc, config=self.config, key=key) from exc

    def public_url(self, key: str) -> str | None:
        """See :meth:`ObjectStore.public_url`: ``public_base_url`` + key, or None."""
        check_key(key)
        if self.config.public_base_url is None:
            return None
        return f"{self.config.public_base_url.rstrip('/')}/{urllib.parse.quote(key)}"

    def open_stream(self, key: str, *, start: int = 0, end: int | None = None) -> io.BufferedReader:
        """Open bytes ``[start, end)`` of the object (``end`` None: to its end) for streaming.

        Returns a forward-only, buffered binary stream; the caller closes it. The first GET
        is made here, so a missing key or bucket raises ObjectNotFound at once. A read that
        fails half-way is resumed where it stopped with a ranged GET pinned to the first
        response's ETag (the object cannot change under the reader), at most
        ``part_attempts`` times in a row; then StorageError. ``start`` must be 0 or below
        the object's size (S3 refuses a range that starts past the end).
        """
        if start < 0 or (end is not None and end <= start):
            raise ValueError(f"invalid byte range [{start}, {end})")
        return io.BufferedReader(_S3ReadStream(self, key, start, end), buffer_size=1 * MIB)

    def _get_range(
        self, key: str, start: int, end: int | None, if_match: str | None
    ) -> tuple[Any, str]:
        """GET ``[start, end)`` of the object; return (streaming body, ETag)."""
        args: dict[str, Any] = {"Bucket": self.config.bucket, "Key": self._full(key)}
        if start > 0 or end is not None:
            args["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        if if_match is not None:
            args["IfMatch"] = if_match
        with self._translated(key):
            response = self._client.get_object(**args)
        body = response["Body"]
        try:
            return body, _etag_of(response, self.config, key)
        except StorageError:
            body.close()
            raise


class _S3ReadStream(io.RawIOBase):
    """A raw stream over one object's byte range that resumes after failed reads.

    Used through :meth:`S3ObjectStore.open_stream`; every botocore error is translated.
    """

    def __init__(self, store: S3ObjectStore, key: str, start: int, end: int | None) -> None:
        super().__init__()
        self._store = store
        self._key = key
        self._pos = start
        self._end = end
        self._body, self._etag = store._get_range(key, start, end, None)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        want = len(buffer)
        if self._end is not None:
            want = min(want, self._end - self._pos)
        if want <= 0:
            return 0
        failures = 0
        while True:
            try:
                data = self._body.read(want)
                break
            except (BotoCoreError, ClientError) as exc:
                err = translate_boto_error(exc, config=self._store.config, key=self._key)
                failures += 1
                if failures >= self._store.config.part_attempts or not _is_transient(err):
                    raise err from exc
            time.sleep(min(0.5 * 2 ** (failures - 1), 5.0))
            self._reopen()
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def _reopen(self) -> None:
        with contextlib.suppress(Exception):
            self._body.close()
        try:
            self._body, _ = self._store._get_range(self._key, self._pos, self._end, self._etag)
        except PreconditionFailed as exc:
            raise StorageError(
                f"{self._store.config.url}/{self._key} changed while it was being read"
            ) from exc

    def close(self) -> None:
        if not self.closed:
            with contextlib.suppress(Exception):
                self._body.close()
        super().close()
