"""Failure drills against Coffer's S3 gateway, driven by tests/s3_failures.rs.

Configured like boto3_suite.py by S3_ENDPOINT, S3_CA, S3_ACCESS and S3_SECRET.

    load BUCKET ACKED        put objects until killed, appending "KEY" to ACKED once each
                             PUT is acknowledged; also start a multipart upload (its key and
                             id first, as "upload KEY ID") and keep adding parts to it
    check BUCKET ACKED       every acknowledged object reads back whole; every object the
                             bucket lists has exactly the content its key implies; the
                             upload left behind is listed, and aborting it cleans it up
    hostile BUCKET           malformed XML, an oversized part, a truncated body, junk on the
                             port: each gets its S3 error (or a closed connection), nothing
                             half-written becomes visible, and the gateway keeps serving
    full BUCKET before|full|after
                             before: the bucket and two small objects; full (the cluster's
                             stores full): a PUT is refused with 507 InsufficientCapacity and
                             a message, the objects still read, and one of them deletes;
                             after (space freed): a PUT is taken again

Object content is derived from the key, so the check needs no record of what was written.
"""

import base64
import concurrent.futures
import hashlib
import os
import random
import socket
import ssl
import sys
import time
import urllib.parse

import boto3
import botocore
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

ENDPOINT = os.environ["S3_ENDPOINT"]
CA = os.environ["S3_CA"]
ACCESS = os.environ["S3_ACCESS"]
SECRET = os.environ["S3_SECRET"]
REGION = "us-east-1"
MIB = 1 << 20
PART_BYTES = 5 * MIB


def client():
    return boto3.client(
        "s3",
        endpoint_url=ENDPOINT,
        region_name=REGION,
        aws_access_key_id=ACCESS,
        aws_secret_access_key=SECRET,
        verify=CA,
        config=Config(
            s3={"addressing_style": "path"},
            retries={"mode": "standard", "max_attempts": 1},
            connect_timeout=30,
            read_timeout=60,
        ),
    )


def content(key):
    """The bytes object KEY holds: its size and bytes follow from the key alone."""
    rng = random.Random(key)
    return rng.randbytes(rng.choice([1, 4096, 300_000, 4 * MIB + 17, 9 * MIB]))


def ok(what):
    print(f"ok: {what}", flush=True)


def fail(what):
    raise AssertionError(what)


def part_content(number):
    return random.Random(number).randbytes(PART_BYTES)


def draft(key):
    return f"draft of {key}".encode()


def load(bucket, acked_path):
    """PUTs objects until killed, each as a draft and then its content (two versions: the
    bucket keeps versions), and after every third a part to two multipart uploads: one the
    check completes, one it aborts."""
    s3 = client()
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    uploads = []
    for key in ("pending/completed", "pending/aborted"):
        uploads.append((key, s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]))
    with open(acked_path, "a", encoding="utf-8") as acked:
        for key, upload_id in uploads:
            acked.write(f"upload {key} {upload_id}\n")
        acked.flush()
        number = 0
        while True:
            number += 1
            key = f"objects/{number:06d}"
            s3.put_object(Bucket=bucket, Key=key, Body=draft(key))
            s3.put_object(Bucket=bucket, Key=key, Body=content(key))
            acked.write(f"{key}\n")
            acked.flush()
            if number % 3 == 0:
                part = number // 3
                for upload_key, upload_id in uploads:
                    s3.upload_part(
                        Bucket=bucket,
                        Key=upload_key,
                        UploadId=upload_id,
                        PartNumber=part,
                        Body=part_content(part),
                    )


def check(bucket, acked_path):
    s3 = client()
    with open(acked_path, encoding="utf-8") as acked:
        lines = [line.split() for line in acked if line.strip()]
    uploads = [(key, upload_id) for (_, key, upload_id) in lines[:2]]
    acked_keys = [fields[0] for fields in lines[2:]]
    if len(acked_keys) < 3:
        fail(f"the load acknowledged only {len(acked_keys)} objects before the kill")
    for key in acked_keys:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        if hashlib.sha256(body).digest() != hashlib.sha256(content(key)).digest():
            fail(f"acknowledged object {key} reads back different ({len(body)} bytes)")
    ok(f"all {len(acked_keys)} acknowledged objects read back whole")
    for key in acked_keys:
        versions = s3.list_object_versions(Bucket=bucket, Prefix=key).get("Versions", [])
        older = [v["VersionId"] for v in versions if v["Key"] == key and not v["IsLatest"]]
        if len(older) != 1:
            fail(f"acknowledged object {key} should have one older version: {versions}")
        body = s3.get_object(Bucket=bucket, Key=key, VersionId=older[0])["Body"].read()
        if body != draft(key):
            fail(f"the older version of {key} reads back different ({len(body)} bytes)")
    ok("the older version of each acknowledged object reads back whole")

    listed = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        listed.extend(o["Key"] for o in page.get("Contents", []))
    missing = set(acked_keys) - set(listed)
    if missing:
        fail(f"acknowledged objects missing from the listing: {sorted(missing)}")
    for key in set(listed) - set(acked_keys):
        # The PUTs in flight at the kill may have committed before their replies were lost:
        # then the object is whole, as its draft or its content.
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        if body not in (draft(key), content(key)):
            fail(f"unacknowledged object {key} is visible and not whole")
    ok(f"the listing holds the acknowledged objects and nothing partial ({len(listed)} listed)")

    listed_uploads = s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    if sorted((u["Key"], u["UploadId"]) for u in listed_uploads) != sorted(uploads):
        fail(f"the uploads in progress should be listed, and only they: {listed_uploads}")
    for key, _ in uploads:
        try:
            s3.head_object(Bucket=bucket, Key=key)
            fail("an uncompleted multipart upload is visible as an object")
        except botocore.exceptions.ClientError as e:
            if e.response["Error"]["Code"] not in ("404", "NoSuchKey"):
                raise

    (completed_key, completed_id), (aborted_key, aborted_id) = uploads
    parts = s3.list_parts(Bucket=bucket, Key=completed_key, UploadId=completed_id)["Parts"]
    if not parts:
        fail("the load uploaded no part before the kill")
    # A part whose upload the kill cut may be recorded or not; a recorded one is whole.
    s3.complete_multipart_upload(
        Bucket=bucket,
        Key=completed_key,
        UploadId=completed_id,
        MultipartUpload={
            "Parts": [{"PartNumber": p["PartNumber"], "ETag": p["ETag"]} for p in parts]
        },
    )
    body = s3.get_object(Bucket=bucket, Key=completed_key)["Body"].read()
    expected = b"".join(part_content(p["PartNumber"]) for p in parts)
    if hashlib.sha256(body).digest() != hashlib.sha256(expected).digest():
        fail(f"the upload completed after the kill reads back different ({len(body)} bytes)")
    ok(f"the interrupted upload completes with its {len(parts)} parts whole")

    s3.abort_multipart_upload(Bucket=bucket, Key=aborted_key, UploadId=aborted_id)
    if s3.list_multipart_uploads(Bucket=bucket).get("Uploads"):
        fail("the aborted upload is still listed")
    ok("the other interrupted upload is listed, invisible as an object, and aborted")


def signed(method, path, body=b"", query="", headers=None):
    """A SigV4-signed request to the gateway, for requests boto3 will not make."""
    url = f"{ENDPOINT}/{urllib.parse.quote(path)}" + (f"?{query}" if query else "")
    headers = dict(headers or {})
    headers.setdefault("x-amz-content-sha256", hashlib.sha256(body).hexdigest())
    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    SigV4Auth(Credentials(ACCESS, SECRET), "s3", REGION).add_auth(request)
    return request.prepare()


def connect():
    host, port = urllib.parse.urlsplit(ENDPOINT).netloc.rsplit(":", 1)
    context = ssl.create_default_context(cafile=CA)
    raw = socket.create_connection((host, int(port)), timeout=30)
    return context.wrap_socket(raw, server_hostname=host)


def exchange(request, send_body=None, declared_length=None, hang_up=False):
    """Sends REQUEST's head (with Content-Length DECLARED_LENGTH if given) and SEND_BODY,
    then reads the response and returns (status, body text); with HANG_UP, closes the
    connection instead, as a client that dies mid-request."""
    target = urllib.parse.urlsplit(request.url)
    path = target.path + (f"?{target.query}" if target.query else "")
    body = (request.body or b"") if send_body is None else send_body
    length = len(body) if declared_length is None else declared_length
    head = [f"{request.method} {path} HTTP/1.1", f"Host: {target.netloc}"]
    head += [
        f"{name}: {value}"
        for name, value in request.headers.items()
        if name.lower() != "content-length"
    ]
    head += [f"Content-Length: {length}", "Connection: close", "", ""]
    with connect() as conn:
        conn.sendall("\r\n".join(head).encode() + body)
        if hang_up:
            return None, ""
        response = b""
        try:
            while chunk := conn.recv(65536):
                response += chunk
        except (ConnectionError, ssl.SSLError):
            pass
    if not response:
        return None, ""
    status = int(response.split(b" ", 2)[1])
    return status, response.decode(errors="replace")


def expect_code(what, status, text, want_status, want_code):
    if status != want_status or f"<Code>{want_code}</Code>" not in text:
        fail(f"{what}: expected {want_status} {want_code}, got {status}: {text[-400:]}")
    ok(f"{what}: {want_status} {want_code}")


def hostile(bucket):
    s3 = client()
    s3.create_bucket(Bucket=bucket)
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="hostile/mp")["UploadId"]
    s3.upload_part(
        Bucket=bucket, Key="hostile/mp", UploadId=upload_id, PartNumber=1, Body=b"x" * 100
    )
    for junk in [b"<CompleteMultipartUpload><Part><PartNumber>1", b"not xml at all \x00\xff"]:
        request = signed("POST", f"{bucket}/hostile/mp", junk, f"uploadId={upload_id}")
        status, text = exchange(request)
        expect_code(f"CompleteMultipartUpload with {junk[:20]!r}", status, text, 400, "MalformedXML")

    request = signed(
        "PUT",
        f"{bucket}/hostile/mp",
        query=f"partNumber=1&uploadId={upload_id}",
        headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"},
    )
    status, text = exchange(request, send_body=b"", declared_length=6 << 30)
    expect_code("a part declared as 6 GiB", status, text, 400, "EntityTooLarge")

    customer_key = base64.b64encode(bytes(range(32))).decode()
    request = signed(
        "PUT",
        f"{bucket}/hostile/sse-c",
        b"sealed?",
        headers={
            "x-amz-server-side-encryption-customer-algorithm": "AES256",
            "x-amz-server-side-encryption-customer-key": customer_key,
        },
    )
    status, text = exchange(request)
    expect_code("an SSE-C PUT without the key's MD5", status, text, 400, "InvalidArgument")

    request = signed(
        "PUT", f"{bucket}/hostile/truncated", headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"}
    )
    exchange(request, send_body=b"y" * 100_000, declared_length=MIB, hang_up=True)
    time.sleep(1)
    try:
        s3.head_object(Bucket=bucket, Key="hostile/truncated")
        fail("a PUT whose body stopped short is visible")
    except botocore.exceptions.ClientError as e:
        if e.response["Error"]["Code"] not in ("404", "NoSuchKey"):
            raise
    ok("a PUT whose body stops short leaves no object")

    for junk in [b"GET / HTTP/1.1\r\n\r\n", os.urandom(3000)]:
        host, port = urllib.parse.urlsplit(ENDPOINT).netloc.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as raw:
            raw.sendall(junk)
            try:
                raw.recv(100)
            except ConnectionError:
                pass
    ok("plain HTTP and random bytes on the TLS port get a closed connection")

    s3.put_object(Bucket=bucket, Key="hostile/after", Body=b"still serving")
    body = s3.get_object(Bucket=bucket, Key="hostile/after")["Body"].read()
    if body != b"still serving":
        fail("the gateway no longer serves after the hostile requests")
    s3.abort_multipart_upload(Bucket=bucket, Key="hostile/mp", UploadId=upload_id)
    ok("the gateway still serves")


def full(bucket, phase):
    s3 = client()
    if phase == "before":
        s3.create_bucket(Bucket=bucket)
        for key in ["kept", "dropped"]:
            s3.put_object(Bucket=bucket, Key=key, Body=key.encode() * 1000)
        ok("two objects stored")
    elif phase == "full":
        try:
            s3.put_object(Bucket=bucket, Key="refused", Body=b"x" * MIB)
        except botocore.exceptions.ClientError as e:
            status = e.response["ResponseMetadata"]["HTTPStatusCode"]
            code = e.response["Error"]["Code"]
            message = e.response["Error"].get("Message", "")
            if (status, code) != (507, "InsufficientCapacity") or "is full" not in message:
                fail(f"a PUT to a full cluster: {status} {code} {message!r}")
            ok(f"a PUT is refused: {status} {code}: {message}")
        else:
            fail("a PUT to a full cluster was taken")
        if s3.get_object(Bucket=bucket, Key="kept")["Body"].read() != b"kept" * 1000:
            fail("an object reads back different while the cluster is full")
        s3.delete_object(Bucket=bucket, Key="dropped")
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
        if keys != ["kept"]:
            fail(f"after a delete while full, the bucket lists {keys}")
        ok("reads and deletes work while full")
    elif phase == "after":
        s3.put_object(Bucket=bucket, Key="taken", Body=b"y" * MIB)
        ok("a PUT is taken once space is freed")
    else:
        fail(f"unknown phase {phase}")


def many_parts(s3, bucket, key, parts):
    """`parts` uploaded as one object `key` of that many parts (the gateway taking parts of
    any size), a few at a time."""
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]

    def send(number):
        response = s3.upload_part(
            Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=parts[number - 1]
        )
        return {"PartNumber": number, "ETag": response["ETag"]}

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        completed = list(pool.map(send, range(1, len(parts) + 1)))
    s3.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": completed}
    )


def race(bucket):
    """GETs streaming an object while another request deletes or overwrites it: each GET
    that started reads the object it started with, whole; a GET after the change does not.
    The last is an object of 2,000 parts, whose segments its entry keeps out of line (the
    gateway takes parts of any size here)."""
    s3 = client()
    s3.create_bucket(Bucket=bucket)
    rng = random.Random(7)
    old, new = rng.randbytes(40 * MIB), rng.randbytes(3 * MIB)
    many = [old[n * 20480:(n + 1) * 20480] for n in range(2000)]
    for key, change, what in [
        ("raced-by-delete", "delete", "a GET raced by delete"),
        ("raced-by-overwrite", "overwrite", "a GET raced by overwrite"),
        ("parts-raced-by-overwrite", "overwrite", "a GET of 2,000 parts raced by overwrite"),
    ]:
        if key.startswith("parts"):
            many_parts(s3, bucket, key, many)
            old = b"".join(many)
        else:
            s3.put_object(Bucket=bucket, Key=key, Body=old)
        body = s3.get_object(Bucket=bucket, Key=key)["Body"]
        first = body.read(MIB)
        if change == "delete":
            s3.delete_object(Bucket=bucket, Key=key)
            try:
                s3.head_object(Bucket=bucket, Key=key)
                fail("an object is found after its delete")
            except botocore.exceptions.ClientError as e:
                if e.response["ResponseMetadata"]["HTTPStatusCode"] != 404:
                    raise
        else:
            s3.put_object(Bucket=bucket, Key=key, Body=new)
            if s3.get_object(Bucket=bucket, Key=key)["Body"].read() != new:
                fail("a GET after an overwrite does not read the new object")
        rest = body.read()
        if first + rest != old:
            fail(f"{what} read {len(first) + len(rest)} bytes that differ")
        ok(f"{what} reads the whole object it started with")
        if change == "overwrite":
            s3.delete_object(Bucket=bucket, Key=key)


def main():
    command, bucket = sys.argv[1], sys.argv[2]
    if command == "load":
        load(bucket, sys.argv[3])
    elif command == "check":
        check(bucket, sys.argv[3])
    elif command == "hostile":
        hostile(bucket)
    elif command == "full":
        full(bucket, sys.argv[3])
    elif command == "race":
        race(bucket)
    else:
        fail(f"unknown command {command}")


if __name__ == "__main__":
    main()
