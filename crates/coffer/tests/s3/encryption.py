"""Server-side encryption drills against Coffer's S3 gateway, driven by
tests/s3_encryption.rs. Configured like boto3_suite.py by S3_ENDPOINT, S3_CA, S3_ACCESS and
S3_SECRET.

    markers BUCKET SSE_MARKER PLAIN_MARKER KMS_KEY
        writes objects full of SSE_MARKER with every kind of server-side encryption (SSE-S3,
        SSE-KMS, SSE-C, a multipart upload, the bucket's default) and one plain object full
        of PLAIN_MARKER, and reads each back
    names BUCKET MARKER
        in a bucket that keeps versions, objects whose keys hold MARKER (one overwritten, one
        deleted: older versions and a delete marker), and a multipart upload left in
        progress; checks that every listing returns them in order
    shred BUCKET KMS_KEY before|rotated|after
        before: in a bucket that keeps versions, an object under KMS_KEY written twice (two
        versions), one under SSE-S3, and a multipart upload under KMS_KEY with one part
        rotated: after the key's rotation (which rewraps), a second object under it and a
        second part; the upload completes, and all three and the older version read back
        after: after the key's removal, its three objects are refused (within the
        gateway's cache sweep), while the SSE-S3 object still reads back
        outage: with the KMS stopped after `after`, the SSE-S3 object (its data key cached)
        still reads back, and a new SSE-S3 object is refused with ServiceUnavailable
"""

import io
import os
import sys
import time

import boto3
import botocore
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

MIB = 1 << 20
# How long a removed KMS key's data keys may stay in the gateway's cache (its sweep is 5 s).
SHRED_WITHIN_SECONDS = 20
CUSTOMER_KEY = bytes(range(32))
# A multipart upload's first part: at least S3's 5 MiB, as a part that is not the last must be.
PART_BEFORE = b"p" * (5 * MIB)


def client():
    return boto3.client(
        "s3",
        endpoint_url=os.environ["S3_ENDPOINT"],
        region_name="us-east-1",
        aws_access_key_id=os.environ["S3_ACCESS"],
        aws_secret_access_key=os.environ["S3_SECRET"],
        verify=os.environ["S3_CA"],
        config=Config(
            s3={"addressing_style": "path"},
            # A 503 (the cluster busy) is retried, as every S3 client does.
            retries={"mode": "standard", "max_attempts": 3},
        ),
    )


def ok(what):
    print(f"ok: {what}", flush=True)


def fail(what):
    raise AssertionError(what)


def filled(marker, size):
    return (marker.encode() * (size // len(marker) + 1))[:size]


def markers(bucket, sse_marker, plain_marker, kms_key):
    s3 = client()
    s3.create_bucket(Bucket=bucket)
    customer = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": CUSTOMER_KEY}
    kinds = {
        "sse-s3": {"ServerSideEncryption": "AES256"},
        "sse-kms": {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": kms_key},
        "sse-c": customer,
    }
    body = filled(sse_marker, 300_000)
    for name, args in kinds.items():
        s3.put_object(Bucket=bucket, Key=name, Body=body, **args)
        read_args = customer if name == "sse-c" else {}
        if s3.get_object(Bucket=bucket, Key=name, **read_args)["Body"].read() != body:
            fail(f"{name} reads back different")
        ok(f"a marker object with {name} reads back")

    large = filled(sse_marker, 11 * MIB + 5)
    s3.upload_fileobj(
        io.BytesIO(large),
        bucket,
        "multipart",
        ExtraArgs={"ServerSideEncryption": "AES256"},
        Config=TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB),
    )
    if s3.get_object(Bucket=bucket, Key="multipart")["Body"].read() != large:
        fail("the multipart SSE object reads back different")
    ok("a multipart marker object with SSE-S3 reads back")

    # Ranges across chunk, stripe and part boundaries, and the last bytes.
    for key, content, first, last in [
        ("sse-s3", body, 0, 0),
        ("sse-s3", body, 4090, 4100),
        ("sse-s3", body, 65530, 65540),
        ("sse-s3", body, 299_990, 299_999),
        ("multipart", large, 4 * MIB - 7, 4 * MIB + 7),
        ("multipart", large, 5 * MIB - 3, 5 * MIB + 3),
        ("multipart", large, 11 * MIB - 2, 11 * MIB + 4),
    ]:
        got = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={first}-{last}")["Body"].read()
        if got != content[first : last + 1]:
            fail(f"bytes {first}-{last} of {key} read back different")
    ok("ranges of the SSE objects read back")

    s3.put_bucket_encryption(
        Bucket=bucket,
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
        },
    )
    s3.put_object(Bucket=bucket, Key="default", Body=body)
    if s3.head_object(Bucket=bucket, Key="default").get("ServerSideEncryption") != "AES256":
        fail("the bucket default did not apply")
    s3.delete_bucket_encryption(Bucket=bucket)
    ok("a marker object under the bucket's default encryption")

    plain = filled(plain_marker, 300_000)
    s3.put_object(Bucket=bucket, Key="plain", Body=plain)
    if s3.get_object(Bucket=bucket, Key="plain")["Body"].read() != plain:
        fail("the plain object reads back different")
    ok("the plain control object reads back")


def altered(bucket, key, intact):
    s3 = client()
    s3.head_object(Bucket=bucket, Key=key)
    try:
        s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except Exception as e:  # an error status, or a body cut short: either way, no content
        ok(f"the GET of {key}, altered on disk, fails: {type(e).__name__}")
    else:
        fail(f"{key} was altered on every disk and still read back whole")
    s3.get_object(Bucket=bucket, Key=intact)["Body"].read()
    ok(f"{intact} still reads")


def refused(call):
    try:
        call()
    except botocore.exceptions.ClientError as e:
        return e.response["Error"]["Code"]
    return None


def shred(bucket, kms_key, phase):
    s3 = client()
    kms = {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": kms_key}
    if phase == "before":
        s3.create_bucket(Bucket=bucket)
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        s3.put_object(Bucket=bucket, Key="old", Body=b"superseded", **kms)
        s3.put_object(Bucket=bucket, Key="old", Body=b"under the first version", **kms)
        s3.put_object(
            Bucket=bucket, Key="managed", Body=b"under SSE-S3", ServerSideEncryption="AES256"
        )
        upload = s3.create_multipart_upload(Bucket=bucket, Key="pending", **kms)["UploadId"]
        s3.upload_part(
            Bucket=bucket, Key="pending", UploadId=upload, PartNumber=1, Body=PART_BEFORE
        )
        ok("objects under the KMS key and under SSE-S3, and an upload's part under the key")
    elif phase == "rotated":
        s3.put_object(Bucket=bucket, Key="new", Body=b"under the second version", **kms)
        (upload,) = s3.list_multipart_uploads(Bucket=bucket)["Uploads"]
        s3.upload_part(
            Bucket=bucket, Key="pending", UploadId=upload["UploadId"], PartNumber=2, Body=b"end"
        )
        parts = s3.list_parts(Bucket=bucket, Key="pending", UploadId=upload["UploadId"])["Parts"]
        s3.complete_multipart_upload(
            Bucket=bucket,
            Key="pending",
            UploadId=upload["UploadId"],
            MultipartUpload={
                "Parts": [{"PartNumber": p["PartNumber"], "ETag": p["ETag"]} for p in parts]
            },
        )
        for key, body in [
            ("old", b"under the first version"),
            ("new", b"under the second version"),
            ("pending", PART_BEFORE + b"end"),
        ]:
            if s3.get_object(Bucket=bucket, Key=key)["Body"].read() != body:
                fail(f"{key} reads back different after the rotation")
        versions = s3.list_object_versions(Bucket=bucket, Prefix="old")["Versions"]
        (older,) = [v["VersionId"] for v in versions if v["Key"] == "old" and not v["IsLatest"]]
        if s3.get_object(Bucket=bucket, Key="old", VersionId=older)["Body"].read() != b"superseded":
            fail("the older version of old reads back different after the rotation")
        ok(
            "after the rotation, objects, an older version and a completed upload under both "
            "versions of the key read back"
        )
    elif phase == "after":
        deadline = time.monotonic() + SHRED_WITHIN_SECONDS
        while True:
            codes = [
                refused(lambda k=k: s3.get_object(Bucket=bucket, Key=k))
                for k in ["old", "new", "pending"]
            ]
            if codes == ["AccessDenied"] * 3:
                break
            if time.monotonic() > deadline:
                fail(f"objects of the removed key still answer {codes}")
            time.sleep(0.5)
        ok("the removed key's objects are refused with AccessDenied")
        if s3.get_object(Bucket=bucket, Key="managed")["Body"].read() != b"under SSE-S3":
            fail("the SSE-S3 object no longer reads back")
        ok("objects under other keys still read back")
    elif phase == "outage":
        if s3.get_object(Bucket=bucket, Key="managed")["Body"].read() != b"under SSE-S3":
            fail("an object whose data key the gateway holds no longer reads with the KMS down")
        ok("with the KMS down, an object whose data key the gateway holds still reads back")
        code = refused(lambda: s3.put_object(
            Bucket=bucket, Key="later", Body=b"x", ServerSideEncryption="AES256"))
        if code != "ServiceUnavailable":
            fail(f"a new SSE-S3 object with the KMS down answered {code}, not ServiceUnavailable")
        ok("with the KMS down, a new data key is refused with ServiceUnavailable")
    else:
        fail(f"unknown phase {phase}")


def names(bucket, marker):
    s3 = client()
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    keys = [f"{marker}/{n:03}" for n in range(40)]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    s3.put_object(Bucket=bucket, Key=keys[0], Body=b"again")
    s3.delete_object(Bucket=bucket, Key=keys[1])
    upload = s3.create_multipart_upload(Bucket=bucket, Key=f"{marker}/upload")["UploadId"]
    s3.upload_part(Bucket=bucket, Key=f"{marker}/upload", UploadId=upload, PartNumber=1, Body=b"p")
    if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        fail(f"ListBuckets does not list {bucket}")
    listed, token = [], {}
    while True:
        page = s3.list_objects_v2(Bucket=bucket, MaxKeys=7, **token)
        listed += [o["Key"] for o in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        token = {"ContinuationToken": page["NextContinuationToken"]}
    if listed != [keys[0]] + keys[2:]:
        fail(f"ListObjectsV2 listed {listed}")
    versions = s3.list_object_versions(Bucket=bucket)
    listed = [(v["Key"], v["IsLatest"]) for v in versions["Versions"]]
    if listed != [(keys[0], True), (keys[0], False), (keys[1], False)] + [(k, True) for k in keys[2:]]:
        fail(f"ListObjectVersions listed {listed}")
    if [m["Key"] for m in versions["DeleteMarkers"]] != [keys[1]]:
        fail(f"ListObjectVersions listed the delete markers {versions['DeleteMarkers']}")
    uploads = s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    if [(u["Key"], u["UploadId"]) for u in uploads] != [(f"{marker}/upload", upload)]:
        fail(f"ListMultipartUploads listed {uploads}")
    ok(f"{len(keys)} keys, their versions and an upload listed in order")


def main():
    command = sys.argv[1]
    if command == "markers":
        markers(*sys.argv[2:6])
    elif command == "names":
        names(*sys.argv[2:4])
    elif command == "altered":
        altered(*sys.argv[2:5])
    elif command == "shred":
        shred(*sys.argv[2:5])
    else:
        fail(f"unknown command {command}")


if __name__ == "__main__":
    main()
