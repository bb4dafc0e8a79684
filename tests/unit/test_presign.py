"""Presigned GET URLs signed without botocore (common/presign.py) are botocore's URLs, byte
for byte: learned from one of botocore's, then compared with botocore's for other keys,
times, expiries and credentials (a property), path-style and virtual-hosted."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.auth
import pytest
from botocore.config import Config
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomswarm.common import s3_store
from bloomswarm.common.presign import Credentials, PresignTemplate, is_plain_key, presign_get
from bloomswarm.common.s3_store import S3ObjectStore
from bloomswarm.common.storage import S3Config

T0 = dt.datetime(2026, 11, 24, 16, 45, 7, tzinfo=dt.timezone.utc)
CREDENTIALS = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None)


def _client(credentials: Credentials, endpoint_url: str | None, region: str) -> Any:
    session = boto3.session.Session(aws_access_key_id=credentials.access_key,
                                    aws_secret_access_key=credentials.secret_key,
                                    aws_session_token=credentials.token, region_name=region)
    config = Config(signature_version="s3v4",
                    s3={"addressing_style": "path"} if endpoint_url else {"addressing_style": "auto"})
    return session.client("s3", endpoint_url=endpoint_url, config=config)


def _botocore_url(client: Any, key: str, expires_s: int, *, at: dt.datetime,
                  monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(botocore.auth, "get_current_datetime",
                        lambda remove_tzinfo=True: at.replace(tzinfo=None))
    url: str = client.generate_presigned_url("get_object", Params={"Bucket": "filters", "Key": key},
                                             ExpiresIn=expires_s)
    return url


ENDPOINTS = [("http://127.0.0.1:9000", "us-east-1"), ("https://s3.example.com:443", "us-east-1"),
             ("http://[::1]:9000", "eu-west-1"), (None, "eu-west-1"), (None, "us-east-1")]


@pytest.mark.parametrize(("endpoint_url", "region"), ENDPOINTS)
@pytest.mark.parametrize("token", [None, "FQoGZXIvYXdzE+/=token"])
def test_urls_signed_here_are_botocores(endpoint_url: str | None, region: str, token: str | None,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    credentials = CREDENTIALS._replace(token=token)
    client = _client(credentials, endpoint_url, region)
    probe = _botocore_url(client, "pre/fix/f0001/v1/filter.bsf", 3600, at=T0, monkeypatch=monkeypatch)
    template = PresignTemplate.learn(probe, "pre/fix/f0001/v1/filter.bsf", credentials)
    assert template is not None
    later = T0 + dt.timedelta(days=1, seconds=3)
    for key, expires in (("pre/fix/f0002/v7/filter.bsf", 3600), ("a", 1), ("x/y.z~_-/w", 604800)):
        assert presign_get(template, key, expires, credentials, later) == _botocore_url(
            client, key, expires, at=later, monkeypatch=monkeypatch)


_PATH_STYLE = _client(CREDENTIALS, "http://127.0.0.1:9000", "us-east-1")
_TEMPLATE = PresignTemplate("http", "127.0.0.1:9000", "127.0.0.1:9000", "/filters/", "us-east-1", "s3")


@settings(max_examples=60, deadline=None)
@given(key=st.from_regex(r"[A-Za-z0-9._~-]{1,8}(/[A-Za-z0-9._~-]{1,8}){0,4}", fullmatch=True),
       expires=st.integers(1, 604800),
       at=st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2100, 1, 1)))
def test_any_plain_key_at_any_time_signs_as_botocore_does(key: str, expires: int, at: dt.datetime) -> None:
    at = at.replace(microsecond=0, tzinfo=dt.timezone.utc)
    with pytest.MonkeyPatch.context() as monkeypatch:
        expected = _botocore_url(_PATH_STYLE, key, expires, at=at, monkeypatch=monkeypatch)
    assert is_plain_key(key)
    assert presign_get(_TEMPLATE, key, expires, CREDENTIALS, at) == expected


def test_a_url_of_another_form_teaches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    key = "f0001/v1/filter.bsf"
    url = _botocore_url(_PATH_STYLE, key, 60, at=T0, monkeypatch=monkeypatch)
    assert PresignTemplate.learn(url, key, CREDENTIALS) == _TEMPLATE
    assert PresignTemplate.learn(url[:-1] + ("0" if url[-1] != "0" else "1"), key, CREDENTIALS) is None
    assert PresignTemplate.learn(url + "&versionId=3", key, CREDENTIALS) is None
    assert PresignTemplate.learn(url, "other/key.bsf", CREDENTIALS) is None  # not the URL's key
    assert PresignTemplate.learn(url, key, CREDENTIALS._replace(secret_key="other")) is None
    assert PresignTemplate.learn("http://h/f?X-Amz-Date=x", "f", CREDENTIALS) is None


def test_keys_that_need_encoding_are_not_plain() -> None:
    assert is_plain_key("filters/f0001/v12/filter.bsf")
    assert not any(is_plain_key(k) for k in ("a b", "a+b", "ü", "a%20b", "a?b", "a#b", ""))


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(s3_store, "utc_now", lambda: T0)
    monkeypatch.setattr(botocore.auth, "get_current_datetime",
                        lambda remove_tzinfo=True: T0.replace(tzinfo=None))
    yield


@pytest.mark.usefixtures("frozen")
def test_the_store_learns_from_its_first_url_then_signs_the_same_urls_itself(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("AWS_ACCESS_KEY_ID", CREDENTIALS.access_key),
                        ("AWS_SECRET_ACCESS_KEY", CREDENTIALS.secret_key),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    store = S3ObjectStore(S3Config(bucket="filters", prefix="pre", endpoint_url="http://127.0.0.1:9000"))
    calls: list[str] = []
    sign = store._client.generate_presigned_url

    def counted(*args: Any, **kwargs: Any) -> str:
        calls.append(kwargs["Params"]["Key"])
        url: str = sign(*args, **kwargs)
        return url

    monkeypatch.setattr(store._client, "generate_presigned_url", counted)
    first = store.presigned_get_url("f0001/v1/filter.bsf", 3600)
    second = store.presigned_get_url("f0002/v1/filter.bsf", 3600)
    odd = store.presigned_get_url("f 3/v1/filter.bsf", 3600)  # needs encoding: botocore's
    assert calls == ["pre/f0001/v1/filter.bsf", "pre/f 3/v1/filter.bsf"]
    assert second == sign("get_object", Params={"Bucket": "filters", "Key": "pre/f0002/v1/filter.bsf"},
                          ExpiresIn=3600)
    assert first.split("?")[0] == "http://127.0.0.1:9000/filters/pre/f0001/v1/filter.bsf"
    assert "f%203" in odd
