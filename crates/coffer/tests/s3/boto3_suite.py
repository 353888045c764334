"""The S3 gateway through boto3, as applications use it: buckets, objects of many sizes, user
metadata, ranged reads, copies, multi-delete, multipart uploads (by hand, part by part, and
through boto3's managed transfers), both listing APIs page by page, presigned URLs, and the
error codes clients act on, including those that keep one user out of another's buckets.

Run by crates/coffer/tests/s3_clients.rs with the Python of the venv that scripts/test makes
(`ensure_s3_tools` in scripts/setup.sh). Configured by the environment:

    S3_ENDPOINT                       https://127.0.0.1:PORT (path-style addressing)
    S3_CA                             PEM file of the CA that signed the gateway's certificate
    S3_ACCESS, S3_SECRET              the first user's credentials
    S3_OTHER_ACCESS, S3_OTHER_SECRET  a second user's, who must not reach the first one's data

Each check prints one line `ok: <what>`. The first mismatch raises an AssertionError that
names the check, the value expected and the value seen, and the script exits non-zero.
Buckets are named per run (a random prefix), and removed at the end with any multipart
upload still in progress in them.
"""

import hashlib
import io
import os
import secrets
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import boto3
import botocore
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError

ENDPOINT = os.environ["S3_ENDPOINT"]
CA = os.environ["S3_CA"]
REGION = "us-east-1"

MIB = 1 << 20
# The cluster stores data in 4 MiB objects, so ranges are chosen to cross those bounds.
STRIPE_BYTES = 4 * MIB
OBJECT_SIZES_BYTES = [0, 1, 4096, STRIPE_BYTES + 3, 20 * MIB]
# Listing pages: a small page forces several round trips over a handful of keys.
PAGE_ENTRIES_MAX = 2
# A listing that has not ended after this many pages is looping.
PAGES_MAX = 50
HTTP_TIMEOUT_SECONDS = 60
# S3's bounds on multipart uploads: every part but the last has at least PART_BYTES_MIN, and
# part numbers run from 1 to PART_NUMBER_MAX.
PART_BYTES_MIN = 5 * MIB
PART_NUMBER_MAX = 10000
# boto3's managed transfer cuts this object into 5 MiB parts, the last one shorter.
MANAGED_TRANSFER_BYTES = 23 * MIB


def client(access, secret, **config):
    """An S3 client of the gateway. No retries: a 5xx the suite must see is not hidden."""
    return boto3.client(
        "s3",
        endpoint_url=ENDPOINT,
        region_name=REGION,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        verify=CA,
        config=Config(
            s3={"addressing_style": "path"},
            retries={"mode": "standard", "max_attempts": 1},
            connect_timeout=HTTP_TIMEOUT_SECONDS,
            read_timeout=HTTP_TIMEOUT_SECONDS,
            **config,
        ),
    )


def ok(what):
    print(f"ok: {what}", flush=True)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def expect(what, got, want):
    if got != want:
        raise AssertionError(f"{what}: expected {want!r}, got {got!r}")


def expect_body(what, got, want):
    """Compares bodies by length and SHA-256, so a mismatch does not print megabytes."""
    if got != want:
        raise AssertionError(
            f"{what}: body differs: expected {len(want)} bytes (sha256 {sha256(want)}), "
            f"got {len(got)} bytes (sha256 {sha256(got)})"
        )


def expect_error(what, codes, call, **params):
    """`call(**params)` must fail with one of the S3 error codes `codes`.

    Responses to HEAD have no body, so botocore reports their HTTP status as the code: a
    caller expecting an error from a HEAD lists "404" or "403" among `codes`.
    """
    try:
        call(**params)
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code")
        if code not in codes:
            raise AssertionError(
                f"{what}: expected error {' or '.join(codes)}, got {code}: {error}"
            )
        return error
    raise AssertionError(f"{what}: expected error {' or '.join(codes)}, but the call succeeded")


def status(response):
    return response["ResponseMetadata"]["HTTPStatusCode"]


def quoted_md5(data):
    return '"' + hashlib.md5(data).hexdigest() + '"'


def multipart_etag(parts):
    """The ETag S3 gives an object completed from `parts` (their contents, in order): the hex
    MD5 of the parts' binary MD5s one after the other, then "-" and the number of parts."""
    digests = b"".join(hashlib.md5(part).digest() for part in parts)
    return f'"{hashlib.md5(digests).hexdigest()}-{len(parts)}"'


def https_get(url):
    """GET with urllib (no SDK involved), trusting only the gateway's CA: (status, body)."""
    context = ssl.create_default_context(cafile=CA)
    try:
        with urllib.request.urlopen(url, context=context, timeout=HTTP_TIMEOUT_SECONDS) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


class Suite:
    def __init__(self):
        run_id = secrets.token_hex(4)
        self.s3 = client(os.environ["S3_ACCESS"], os.environ["S3_SECRET"])
        self.other = client(os.environ["S3_OTHER_ACCESS"], os.environ["S3_OTHER_SECRET"])
        self.bucket = f"boto3-{run_id}-objects"
        self.listing_bucket = f"boto3-{run_id}-listing"
        self.scratch_bucket = f"boto3-{run_id}-scratch"
        self.missing_bucket = f"boto3-{run_id}-never-created"
        # Object name -> content, for the objects of self.bucket.
        self.objects = {}

    def put(self, object_name, data, **params):
        response = self.s3.put_object(Bucket=self.bucket, Key=object_name, Body=data, **params)
        self.objects[object_name] = data
        return response

    def get(self, object_name, **params):
        response = self.s3.get_object(Bucket=self.bucket, Key=object_name, **params)
        return response, response["Body"].read()

    # Buckets ----------------------------------------------------------------------------

    def buckets(self):
        for name in [self.bucket, self.listing_bucket, self.scratch_bucket]:
            self.s3.create_bucket(Bucket=name)
        ok("create_bucket of three buckets")
        for name in [self.bucket, self.listing_bucket, self.scratch_bucket]:
            expect(f"head_bucket {name} status", status(self.s3.head_bucket(Bucket=name)), 200)
        ok("head_bucket of each")
        listed = {b["Name"] for b in self.s3.list_buckets()["Buckets"]}
        for name in [self.bucket, self.listing_bucket, self.scratch_bucket]:
            if name not in listed:
                raise AssertionError(f"list_buckets: {name} missing from {sorted(listed)}")
        ok("list_buckets shows them")
        # us-east-1 is reported as an empty LocationConstraint by AWS; accept it spelled out.
        location = self.s3.get_bucket_location(Bucket=self.bucket).get("LocationConstraint")
        if location not in (None, "", REGION):
            raise AssertionError(
                f"get_bucket_location: expected {REGION} or empty, got {location!r}"
            )
        ok(f"get_bucket_location is {location!r}")
        expect_error(
            "create_bucket of a bucket one already owns",
            ["BucketAlreadyOwnedByYou", "BucketAlreadyExists"],
            self.s3.create_bucket,
            Bucket=self.bucket,
        )
        ok("create_bucket of an existing own bucket is refused")
        self.s3.delete_bucket(Bucket=self.scratch_bucket)
        expect_error(
            "head_bucket after delete_bucket",
            ["404", "NoSuchBucket"],
            self.s3.head_bucket,
            Bucket=self.scratch_bucket,
        )
        listed = {b["Name"] for b in self.s3.list_buckets()["Buckets"]}
        if self.scratch_bucket in listed:
            raise AssertionError(f"list_buckets still shows deleted {self.scratch_bucket}")
        ok("delete_bucket of an empty bucket")

    # Objects ----------------------------------------------------------------------------

    def objects_of_many_sizes(self):
        for size in OBJECT_SIZES_BYTES:
            object_name = f"sizes/{size}"
            data = os.urandom(size)
            response = self.put(object_name, data)
            expect(f"put_object {object_name} ETag", response["ETag"], quoted_md5(data))
            head = self.s3.head_object(Bucket=self.bucket, Key=object_name)
            expect(f"head_object {object_name} ContentLength", head["ContentLength"], size)
            expect(f"head_object {object_name} ETag", head["ETag"], quoted_md5(data))
            response, body = self.get(object_name)
            expect(f"get_object {object_name} ContentLength", response["ContentLength"], size)
            expect(f"get_object {object_name} ETag", response["ETag"], quoted_md5(data))
            expect(f"get_object {object_name} sha256", sha256(body), sha256(data))
            ok(f"put, head and get of {size} bytes (ETag is the quoted MD5)")

    def payload_modes(self):
        """PutObject in the two ways botocore sends a body over HTTPS.

        By default (botocore 1.36 and later) the body goes aws-chunked with a trailing CRC32
        checksum and an unsigned payload; asking for checksums only when required makes it
        sign the payload's SHA-256 in the headers instead.
        """
        signed = client(
            os.environ["S3_ACCESS"],
            os.environ["S3_SECRET"],
            request_checksum_calculation="when_required",
        )
        for mode, s3 in [("the default payload mode", self.s3), ("a signed payload", signed)]:
            object_name = f"modes/{mode.replace(' ', '-')}"
            data = os.urandom(MIB + 17)
            response = s3.put_object(Bucket=self.bucket, Key=object_name, Body=data)
            self.objects[object_name] = data
            expect(f"put_object in {mode}: ETag", response["ETag"], quoted_md5(data))
            _, body = self.get(object_name)
            expect_body(f"get_object after a put in {mode}", body, data)
            ok(f"put_object in {mode}")

    def metadata(self):
        object_name = "metadata/doc"
        data = b"coffer keeps the content type and the user metadata\n"
        user_metadata = {"color": "blue", "owner-name": "alice"}
        self.put(object_name, data, ContentType="application/x-coffer-test", Metadata=user_metadata)
        head = self.s3.head_object(Bucket=self.bucket, Key=object_name)
        expect("head_object ContentType", head["ContentType"], "application/x-coffer-test")
        expect("head_object Metadata", head["Metadata"], user_metadata)
        response, body = self.get(object_name)
        expect("get_object ContentType", response["ContentType"], "application/x-coffer-test")
        expect("get_object Metadata", response["Metadata"], user_metadata)
        expect_body("get_object of the object with metadata", body, data)
        ok("content type and x-amz-meta-* round trip")

    def ranges(self):
        for size in [STRIPE_BYTES + 3, 20 * MIB]:
            object_name = f"sizes/{size}"
            data = self.objects[object_name]
            # The last stripe bound before the end; the middle range stops short of the end.
            boundary = (size - 1) // STRIPE_BYTES * STRIPE_BYTES
            middle_first, middle_last = boundary - 1000, min(boundary + 999, size - 2)
            cases = [
                ("the first bytes", "bytes=0-99", 0, 99),
                (
                    f"the middle, across the {boundary >> 20} MiB bound",
                    f"bytes={middle_first}-{middle_last}",
                    middle_first,
                    middle_last,
                ),
                ("a suffix", "bytes=-100", size - 100, size - 1),
                ("an open end", f"bytes={size - 5000}-", size - 5000, size - 1),
            ]
            for what, range_header, first, last in cases:
                response, body = self.get(object_name, Range=range_header)
                label = f"get_object {object_name} Range {range_header}"
                expect(f"{label} status", status(response), 206)
                expect(
                    f"{label} ContentRange",
                    response["ContentRange"],
                    f"bytes {first}-{last}/{size}",
                )
                expect(f"{label} ContentLength", response["ContentLength"], last - first + 1)
                expect_body(label, body, data[first : last + 1])
                ok(f"ranged get of {what} of {size} bytes ({range_header})")

    def copies(self):
        source = "metadata/doc"
        data = self.objects[source]
        copy_source = {"Bucket": self.bucket, "Key": source}

        self.s3.copy_object(
            Bucket=self.bucket, Key="copies/kept", CopySource=copy_source, MetadataDirective="COPY"
        )
        self.objects["copies/kept"] = data
        head = self.s3.head_object(Bucket=self.bucket, Key="copies/kept")
        expect("copy (COPY) ContentType", head["ContentType"], "application/x-coffer-test")
        expect("copy (COPY) Metadata", head["Metadata"], {"color": "blue", "owner-name": "alice"})
        expect("copy (COPY) ETag", head["ETag"], quoted_md5(data))
        _, body = self.get("copies/kept")
        expect_body("copy (COPY) body", body, data)
        ok("copy_object with MetadataDirective COPY keeps the metadata")

        self.s3.copy_object(
            Bucket=self.bucket,
            Key="copies/replaced",
            CopySource=copy_source,
            MetadataDirective="REPLACE",
            ContentType="text/plain",
            Metadata={"color": "red"},
        )
        self.objects["copies/replaced"] = data
        head = self.s3.head_object(Bucket=self.bucket, Key="copies/replaced")
        expect("copy (REPLACE) ContentType", head["ContentType"], "text/plain")
        expect("copy (REPLACE) Metadata", head["Metadata"], {"color": "red"})
        _, body = self.get("copies/replaced")
        expect_body("copy (REPLACE) body", body, data)
        ok("copy_object with MetadataDirective REPLACE replaces it")

        # A large copy moves every stripe, not only the first.
        big = f"sizes/{20 * MIB}"
        self.s3.copy_object(
            Bucket=self.bucket, Key="copies/big", CopySource={"Bucket": self.bucket, "Key": big}
        )
        self.objects["copies/big"] = self.objects[big]
        _, body = self.get("copies/big")
        expect_body("copy of 20 MiB", body, self.objects[big])
        ok("copy_object of 20 MiB")

    def deletes(self):
        object_name = "delete/one"
        self.put(object_name, b"short-lived")
        self.s3.delete_object(Bucket=self.bucket, Key=object_name)
        del self.objects[object_name]
        expect_error(
            "get_object after delete_object",
            ["NoSuchKey"],
            self.s3.get_object,
            Bucket=self.bucket,
            Key=object_name,
        )
        expect_error(
            "head_object after delete_object",
            ["404", "NoSuchKey"],
            self.s3.head_object,
            Bucket=self.bucket,
            Key=object_name,
        )
        # Deleting what is not there succeeds in S3.
        self.s3.delete_object(Bucket=self.bucket, Key=object_name)
        ok("delete_object, and again on the missing object")

        object_names = [f"delete/many-{i}" for i in range(4)]
        for object_name in object_names:
            self.put(object_name, object_name.encode())
        requested = object_names + ["delete/never-written"]
        response = self.s3.delete_objects(
            Bucket=self.bucket,
            Delete={"Objects": [{"Key": object_name} for object_name in requested]},
        )
        expect("delete_objects Errors", response.get("Errors", []), [])
        expect(
            "delete_objects Deleted",
            sorted(d["Key"] for d in response.get("Deleted", [])),
            sorted(requested),
        )
        for object_name in object_names:
            del self.objects[object_name]
        left = self.s3.list_objects_v2(Bucket=self.bucket, Prefix="delete/").get("Contents", [])
        expect("objects left under delete/ after delete_objects", [o["Key"] for o in left], [])
        ok("delete_objects of four objects and a missing one reports all five deleted")

    # Multipart uploads ------------------------------------------------------------------

    def create_upload(self, object_name, **params):
        response = self.s3.create_multipart_upload(Bucket=self.bucket, Key=object_name, **params)
        return response["UploadId"]

    def upload_part(self, object_name, upload_id, number, data):
        """Uploads `data` as part `number`, checks its ETag, and returns the part as
        complete_multipart_upload lists it."""
        response = self.s3.upload_part(
            Bucket=self.bucket, Key=object_name, UploadId=upload_id, PartNumber=number, Body=data
        )
        expect(f"upload_part {object_name} part {number} ETag", response["ETag"], quoted_md5(data))
        return {"PartNumber": number, "ETag": response["ETag"]}

    def complete(self, object_name, upload_id, parts):
        return self.s3.complete_multipart_upload(
            Bucket=self.bucket,
            Key=object_name,
            UploadId=upload_id,
            MultipartUpload={"Parts": parts},
        )

    def abort(self, object_name, upload_id):
        self.s3.abort_multipart_upload(Bucket=self.bucket, Key=object_name, UploadId=upload_id)

    def list_parts_pages(self, object_name, upload_id, page_parts_max):
        """Every page of a ListParts, following NextPartNumberMarker: [(number, size, ETag)]."""
        parts, marker = [], None
        params = {"Bucket": self.bucket, "Key": object_name, "UploadId": upload_id}
        for _ in range(PAGES_MAX):
            if marker is not None:
                params["PartNumberMarker"] = marker
            page = self.s3.list_parts(MaxParts=page_parts_max, **params)
            page_parts = [(p["PartNumber"], p["Size"], p["ETag"]) for p in page.get("Parts", [])]
            if len(page_parts) > page_parts_max:
                raise AssertionError(
                    f"list_parts: page of {len(page_parts)} parts, MaxParts {page_parts_max}"
                )
            parts += page_parts
            if not page["IsTruncated"]:
                return parts
            marker = page.get("NextPartNumberMarker")
            if not marker:
                raise AssertionError("list_parts: truncated page without NextPartNumberMarker")
        raise AssertionError(f"list_parts: still truncated after {PAGES_MAX} pages")

    def list_uploads_pages(self, page_uploads_max, **params):
        """Every page of a ListMultipartUploads, following NextKeyMarker and
        NextUploadIdMarker: [(object name, upload id)]."""
        uploads = []
        for _ in range(PAGES_MAX):
            page = self.s3.list_multipart_uploads(
                Bucket=self.bucket, MaxUploads=page_uploads_max, **params
            )
            page_uploads = [(u["Key"], u["UploadId"]) for u in page.get("Uploads", [])]
            if len(page_uploads) > page_uploads_max:
                raise AssertionError(
                    f"list_multipart_uploads {params}: page of {len(page_uploads)} uploads, "
                    f"MaxUploads {page_uploads_max}"
                )
            uploads += page_uploads
            if not page["IsTruncated"]:
                return uploads
            if not page.get("NextKeyMarker"):
                raise AssertionError(
                    f"list_multipart_uploads {params}: truncated page without NextKeyMarker"
                )
            params["KeyMarker"] = page["NextKeyMarker"]
            params["UploadIdMarker"] = page.get("NextUploadIdMarker", "")
        raise AssertionError(
            f"list_multipart_uploads {params}: still truncated after {PAGES_MAX} pages"
        )

    def multipart_upload(self):
        """Three parts, the second uploaded twice, listed, completed and read back."""
        object_name = "multipart/three-parts"
        parts = [os.urandom(PART_BYTES_MIN), os.urandom(PART_BYTES_MIN), os.urandom(MIB + 7)]
        user_metadata = {"parts": "three"}
        upload_id = self.create_upload(
            object_name, ContentType="application/x-coffer-parts", Metadata=user_metadata
        )
        completed = [
            self.upload_part(object_name, upload_id, number, data)
            for number, data in enumerate(parts, start=1)
        ]
        ok("upload_part of 5 MiB, 5 MiB and 1 MiB + 7 bytes: each ETag is the part's quoted MD5")

        replaced = completed[1]
        parts[1] = os.urandom(PART_BYTES_MIN)
        completed[1] = self.upload_part(object_name, upload_id, 2, parts[1])
        expect(
            "list_parts, one part a page",
            self.list_parts_pages(object_name, upload_id, page_parts_max=1),
            [(number, len(data), quoted_md5(data)) for number, data in enumerate(parts, start=1)],
        )
        ok("list_parts with MaxParts 1 pages through the three parts, part 2 as re-uploaded")
        expect_error(
            "complete_multipart_upload naming the replaced part 2's ETag",
            ["InvalidPart"],
            self.complete,
            object_name=object_name,
            upload_id=upload_id,
            parts=[completed[0], replaced, completed[2]],
        )
        ok("complete_multipart_upload with the ETag of a replaced part: InvalidPart")

        response = self.complete(object_name, upload_id, completed)
        data = b"".join(parts)
        self.objects[object_name] = data
        expect("complete_multipart_upload ETag", response["ETag"], multipart_etag(parts))
        head = self.s3.head_object(Bucket=self.bucket, Key=object_name)
        expect(
            "head_object of the completed upload ContentLength", head["ContentLength"], len(data)
        )
        expect("head_object of the completed upload ETag", head["ETag"], multipart_etag(parts))
        expect(
            "head_object of the completed upload ContentType",
            head["ContentType"],
            "application/x-coffer-parts",
        )
        expect("head_object of the completed upload Metadata", head["Metadata"], user_metadata)
        ok(
            "complete_multipart_upload: ETag is the MD5 of the parts' MD5s and -3; content type "
            "and metadata are those given at creation"
        )

        response, body = self.get(object_name)
        expect("get_object of the completed upload ETag", response["ETag"], multipart_etag(parts))
        expect("get_object of the completed upload sha256", sha256(body), sha256(data))
        ok("get_object of the completed upload: the three parts in order, part 2's new bytes")

        size = len(data)
        cases = [
            ("parts 1 and 2", PART_BYTES_MIN - 1000, PART_BYTES_MIN + 999),
            ("parts 1, 2 and 3", PART_BYTES_MIN - 7, 2 * PART_BYTES_MIN + 6),
        ]
        for what, first, last in cases:
            label = f"get_object {object_name} Range bytes={first}-{last}"
            response, body = self.get(object_name, Range=f"bytes={first}-{last}")
            expect(f"{label} status", status(response), 206)
            expect(
                f"{label} ContentRange", response["ContentRange"], f"bytes {first}-{last}/{size}"
            )
            expect(f"{label} sha256", sha256(body), sha256(data[first : last + 1]))
            ok(f"ranged get across the bounds of {what} of the completed upload")

        expect_error(
            "list_parts of a completed upload",
            ["NoSuchUpload"],
            self.s3.list_parts,
            Bucket=self.bucket,
            Key=object_name,
            UploadId=upload_id,
        )
        ok("list_parts of a completed upload: NoSuchUpload")

    def multipart_part_copies(self):
        """Parts copied from ranges of existing objects: one single PUT (the range crosses
        stripe bounds) and the multipart object above (the range crosses a part bound)."""
        object_name = "multipart/copied-parts"
        sources = [
            (f"sizes/{20 * MIB}", STRIPE_BYTES - 1000, STRIPE_BYTES - 1000 + PART_BYTES_MIN - 1),
            ("multipart/three-parts", PART_BYTES_MIN - 500, PART_BYTES_MIN + 499),
        ]
        upload_id = self.create_upload(object_name)
        completed, parts = [], []
        for number, (source, first, last) in enumerate(sources, start=1):
            response = self.s3.upload_part_copy(
                Bucket=self.bucket,
                Key=object_name,
                UploadId=upload_id,
                PartNumber=number,
                CopySource={"Bucket": self.bucket, "Key": source},
                CopySourceRange=f"bytes={first}-{last}",
            )
            part = self.objects[source][first : last + 1]
            etag = response["CopyPartResult"]["ETag"]
            expect(
                f"upload_part_copy of {source} bytes={first}-{last} ETag", etag, quoted_md5(part)
            )
            completed.append({"PartNumber": number, "ETag": etag})
            parts.append(part)
        response = self.complete(object_name, upload_id, completed)
        expect(
            "complete_multipart_upload of copied parts ETag",
            response["ETag"],
            multipart_etag(parts),
        )
        data = b"".join(parts)
        self.objects[object_name] = data
        _, body = self.get(object_name)
        expect("get_object of the upload of copied parts sha256", sha256(body), sha256(data))
        ok("upload_part_copy of byte ranges of a PUT object and of a multipart object, completed")

    def multipart_errors(self):
        """The completions S3 refuses, and upload ids it does not know. A refused completion
        leaves the upload as it was."""
        object_name = "multipart/refused"
        upload_id = self.create_upload(object_name)
        small = self.upload_part(object_name, upload_id, 1, os.urandom(MIB))
        full = self.upload_part(object_name, upload_id, 2, os.urandom(PART_BYTES_MIN))
        refusals = [
            ("EntityTooSmall", "a first part of 1 MiB", [small, full]),
            ("InvalidPartOrder", "parts listed in descending order", [full, small]),
            ("InvalidPart", "a wrong ETag", [{"PartNumber": 1, "ETag": quoted_md5(b"other")}]),
            (
                "InvalidPart",
                "a part never uploaded",
                [full, {"PartNumber": 3, "ETag": full["ETag"]}],
            ),
        ]
        for code, what, parts in refusals:
            expect_error(
                f"complete_multipart_upload with {what}",
                [code],
                self.complete,
                object_name=object_name,
                upload_id=upload_id,
                parts=parts,
            )
            ok(f"complete_multipart_upload with {what}: {code}")
        expect(
            "list_parts after refused completions",
            self.list_parts_pages(object_name, upload_id, 1000),
            [(1, MIB, small["ETag"]), (2, PART_BYTES_MIN, full["ETag"])],
        )
        expect_error(
            "get_object of an upload never completed",
            ["NoSuchKey"],
            self.s3.get_object,
            Bucket=self.bucket,
            Key=object_name,
        )
        ok("after refused completions the upload keeps its parts and no object was made")

        for number in [0, PART_NUMBER_MAX + 1]:
            expect_error(
                f"upload_part number {number}",
                ["InvalidArgument"],
                self.s3.upload_part,
                Bucket=self.bucket,
                Key=object_name,
                UploadId=upload_id,
                PartNumber=number,
                Body=b"x",
            )
        ok(f"upload_part numbered 0 or {PART_NUMBER_MAX + 1}: InvalidArgument")
        self.abort(object_name, upload_id)

        made_up = "coffer-no-such-upload-" + secrets.token_hex(8)
        calls = [
            ("upload_part", self.s3.upload_part, {"PartNumber": 1, "Body": b"x"}),
            ("list_parts", self.s3.list_parts, {}),
            (
                "complete_multipart_upload",
                self.s3.complete_multipart_upload,
                {"MultipartUpload": {"Parts": [{"PartNumber": 1, "ETag": quoted_md5(b"x")}]}},
            ),
            ("abort_multipart_upload", self.s3.abort_multipart_upload, {}),
        ]
        for name, call, params in calls:
            expect_error(
                f"{name} of a made-up upload id",
                ["NoSuchUpload"],
                call,
                Bucket=self.bucket,
                Key=object_name,
                UploadId=made_up,
                **params,
            )
        ok("upload_part, list_parts, complete and abort of a made-up upload id: NoSuchUpload")

    def multipart_listing_and_abort(self):
        """Uploads in progress are listed; completed and aborted ones are not, and an aborted
        upload's id is unknown from then on."""
        prefix = "multipart/listed/"
        in_progress = []
        for name in ["a", "b"]:
            object_name = prefix + name
            upload_id = self.create_upload(object_name)
            self.upload_part(object_name, upload_id, 1, object_name.encode())
            in_progress.append((object_name, upload_id))

        completed_name = prefix + "completed"
        upload_id = self.create_upload(completed_name)
        part = self.upload_part(completed_name, upload_id, 1, b"completed")
        self.complete(completed_name, upload_id, [part])
        self.objects[completed_name] = b"completed"

        aborted_name = prefix + "aborted"
        aborted_id = self.create_upload(aborted_name)
        part = self.upload_part(aborted_name, aborted_id, 1, b"aborted")
        self.abort(aborted_name, aborted_id)

        outside_name = "multipart/not-listed"
        outside_id = self.create_upload(outside_name)

        expect(
            f"list_multipart_uploads Prefix {prefix}, one upload a page",
            self.list_uploads_pages(1, Prefix=prefix),
            in_progress,
        )
        ok(
            "list_multipart_uploads with a prefix, a page of one at a time, shows the two "
            "uploads in progress, not the completed or aborted ones"
        )

        for name, call, params in [
            ("upload_part", self.s3.upload_part, {"PartNumber": 2, "Body": b"x"}),
            ("list_parts", self.s3.list_parts, {}),
            (
                "complete_multipart_upload",
                self.s3.complete_multipart_upload,
                {"MultipartUpload": {"Parts": [part]}},
            ),
        ]:
            expect_error(
                f"{name} after abort_multipart_upload",
                ["NoSuchUpload"],
                call,
                Bucket=self.bucket,
                Key=aborted_name,
                UploadId=aborted_id,
                **params,
            )
        expect_error(
            "get_object of an aborted upload",
            ["NoSuchKey"],
            self.s3.get_object,
            Bucket=self.bucket,
            Key=aborted_name,
        )
        ok("after abort_multipart_upload its id gets NoSuchUpload, and no object was made")

        for object_name, upload_id in in_progress + [(outside_name, outside_id)]:
            self.abort(object_name, upload_id)
        expect("list_multipart_uploads after aborting all", self.list_uploads_pages(1000), [])
        ok("no upload is left in progress once all are completed or aborted")

    def managed_transfer(self):
        """boto3's upload_fileobj and download_fileobj: parts and ranged GETs of 5 MiB, sent
        several at once."""
        config = TransferConfig(
            multipart_threshold=PART_BYTES_MIN, multipart_chunksize=PART_BYTES_MIN
        )
        object_name = "multipart/managed"
        data = os.urandom(MANAGED_TRANSFER_BYTES)
        self.s3.upload_fileobj(io.BytesIO(data), self.bucket, object_name, Config=config)
        self.objects[object_name] = data
        parts = [data[at : at + PART_BYTES_MIN] for at in range(0, len(data), PART_BYTES_MIN)]
        head = self.s3.head_object(Bucket=self.bucket, Key=object_name)
        expect("head_object after upload_fileobj ContentLength", head["ContentLength"], len(data))
        expect("head_object after upload_fileobj ETag", head["ETag"], multipart_etag(parts))
        ok(f"upload_fileobj of {len(data) >> 20} MiB in parts of 5 MiB: ETag ends -{len(parts)}")
        downloaded = io.BytesIO()
        self.s3.download_fileobj(self.bucket, object_name, downloaded, Config=config)
        expect("download_fileobj sha256", sha256(downloaded.getvalue()), sha256(data))
        ok(f"download_fileobj of {len(data) >> 20} MiB in ranges of 5 MiB gives the bytes uploaded")

    # Listing ----------------------------------------------------------------------------

    LISTING_OBJECT_NAMES = ["a/1", "a/2", "a/b/3", "b/4", "c", "d/5", "d/6", "e", "f/g/h"]

    def list_v2_pages(self, **params):
        """Every page of a ListObjectsV2, following ContinuationToken: (keys, prefixes)."""
        object_names, prefixes, token = [], [], None
        for _ in range(PAGES_MAX):
            if token is not None:
                params["ContinuationToken"] = token
            page = self.s3.list_objects_v2(
                Bucket=self.listing_bucket, MaxKeys=PAGE_ENTRIES_MAX, **params
            )
            page_names = [o["Key"] for o in page.get("Contents", [])]
            page_prefixes = [p["Prefix"] for p in page.get("CommonPrefixes", [])]
            entries = len(page_names) + len(page_prefixes)
            if entries > PAGE_ENTRIES_MAX:
                raise AssertionError(
                    f"list_objects_v2 {params}: page of {entries} entries, MaxKeys {PAGE_ENTRIES_MAX}"
                )
            expect(f"list_objects_v2 {params} KeyCount", page["KeyCount"], entries)
            object_names += page_names
            prefixes += page_prefixes
            if not page["IsTruncated"]:
                return object_names, prefixes
            token = page.get("NextContinuationToken")
            if not token:
                raise AssertionError(
                    f"list_objects_v2 {params}: truncated page without NextContinuationToken"
                )
        raise AssertionError(f"list_objects_v2 {params}: still truncated after {PAGES_MAX} pages")

    def list_v1_pages(self, **params):
        """Every page of a ListObjects (v1), following markers as botocore's paginator does:
        NextMarker when the gateway gives one, else the last key of the page."""
        object_names, prefixes, marker = [], [], None
        for _ in range(PAGES_MAX):
            if marker is not None:
                params["Marker"] = marker
            page = self.s3.list_objects(
                Bucket=self.listing_bucket, MaxKeys=PAGE_ENTRIES_MAX, **params
            )
            page_names = [o["Key"] for o in page.get("Contents", [])]
            page_prefixes = [p["Prefix"] for p in page.get("CommonPrefixes", [])]
            entries = len(page_names) + len(page_prefixes)
            if entries > PAGE_ENTRIES_MAX:
                raise AssertionError(
                    f"list_objects {params}: page of {entries} entries, MaxKeys {PAGE_ENTRIES_MAX}"
                )
            object_names += page_names
            prefixes += page_prefixes
            if not page["IsTruncated"]:
                return object_names, prefixes
            marker = page.get("NextMarker") or (page_names[-1] if page_names else None)
            if not marker:
                raise AssertionError(
                    f"list_objects {params}: truncated page with no marker to go on from"
                )
        raise AssertionError(f"list_objects {params}: still truncated after {PAGES_MAX} pages")

    def listing(self):
        for object_name in self.LISTING_OBJECT_NAMES:
            self.s3.put_object(
                Bucket=self.listing_bucket, Key=object_name, Body=object_name.encode()
            )
        everything = sorted(self.LISTING_OBJECT_NAMES)
        top_object_names = ["c", "e"]
        top_prefixes = ["a/", "b/", "d/", "f/"]

        for name, pages in [
            ("list_objects_v2", self.list_v2_pages),
            ("list_objects", self.list_v1_pages),
        ]:
            expect(f"{name} of everything", pages(), (everything, []))
            ok(f"{name} pages of {PAGE_ENTRIES_MAX} give all {len(everything)} keys in order")
            expect(f"{name} Prefix d/", pages(Prefix="d/"), (["d/5", "d/6"], []))
            ok(f"{name} with a prefix")
            expect(f"{name} Delimiter /", pages(Delimiter="/"), (top_object_names, top_prefixes))
            ok(f"{name} with delimiter / gives keys and CommonPrefixes, paged")
            expect(
                f"{name} Prefix a/ Delimiter /",
                pages(Prefix="a/", Delimiter="/"),
                (["a/1", "a/2"], ["a/b/"]),
            )
            ok(f"{name} with a prefix and a delimiter")

        expect(
            "list_objects_v2 StartAfter c",
            self.list_v2_pages(StartAfter="c"),
            ([object_name for object_name in everything if object_name > "c"], []),
        )
        ok("list_objects_v2 with StartAfter")

        # One page with room for everything: not truncated, and sizes are reported.
        page = self.s3.list_objects_v2(Bucket=self.listing_bucket)
        expect("list_objects_v2 in one page IsTruncated", page["IsTruncated"], False)
        expect(
            "list_objects_v2 sizes",
            {o["Key"]: o["Size"] for o in page["Contents"]},
            {object_name: len(object_name) for object_name in self.LISTING_OBJECT_NAMES},
        )
        ok("list_objects_v2 in one page reports every size")

    # Presigned URLs ---------------------------------------------------------------------

    def presigned(self):
        object_name = f"sizes/{STRIPE_BYTES + 3}"
        data = self.objects[object_name]
        # boto3 presigns with SigV2 unless told otherwise; both must work, and both must
        # refuse an altered signature.
        for version, signature_field in [("s3v4", "X-Amz-Signature"), ("s3", "Signature")]:
            signer = client(
                os.environ["S3_ACCESS"], os.environ["S3_SECRET"], signature_version=version
            )
            url = signer.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": object_name}, ExpiresIn=300
            )
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
            expect(f"{version} presigned URL carries {signature_field}", signature_field in query, True)
            code, body = https_get(url)
            expect(f"{version} presigned GET status", code, 200)
            expect_body(f"{version} presigned GET", body, data)
            ok(f"a {version} presigned GET URL fetched with urllib returns the object")

            parts = urllib.parse.urlsplit(url)
            query[signature_field] = ["0" * len(query[signature_field][0])]
            forged = urllib.parse.urlunsplit(
                parts._replace(query=urllib.parse.urlencode(query, doseq=True))
            )
            code, _ = https_get(forged)
            expect(f"{version} presigned GET with a forged signature: status", code, 403)
            ok(f"a {version} presigned URL with an altered signature is refused with 403")

            url = signer.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": object_name}, ExpiresIn=1
            )
            time.sleep(2)
            code, _ = https_get(url)
            expect(f"{version} presigned GET after it expired: status", code, 403)
            ok(f"an expired {version} presigned URL is refused with 403")

    # Errors -----------------------------------------------------------------------------

    def errors(self):
        expect_error(
            "get_object of a missing key",
            ["NoSuchKey"],
            self.s3.get_object,
            Bucket=self.bucket,
            Key="no/such/key",
        )
        ok("get_object of a missing key: NoSuchKey")

        missing = self.missing_bucket
        expect_error(
            "get_object in a missing bucket",
            ["NoSuchBucket"],
            self.s3.get_object,
            Bucket=missing,
            Key="x",
        )
        expect_error(
            "put_object in a missing bucket",
            ["NoSuchBucket"],
            self.s3.put_object,
            Bucket=missing,
            Key="x",
            Body=b"x",
        )
        expect_error(
            "list_objects_v2 of a missing bucket",
            ["NoSuchBucket"],
            self.s3.list_objects_v2,
            Bucket=missing,
        )
        expect_error(
            "list_objects of a missing bucket",
            ["NoSuchBucket"],
            self.s3.list_objects,
            Bucket=missing,
        )
        expect_error(
            "delete_bucket of a missing bucket",
            ["NoSuchBucket"],
            self.s3.delete_bucket,
            Bucket=missing,
        )
        expect_error(
            "head_bucket of a missing bucket",
            ["404", "NoSuchBucket"],
            self.s3.head_bucket,
            Bucket=missing,
        )
        ok("operations on a missing bucket: NoSuchBucket")

        expect_error(
            "delete_bucket of a non-empty bucket",
            ["BucketNotEmpty"],
            self.s3.delete_bucket,
            Bucket=self.bucket,
        )
        expect(
            "head_bucket after a refused delete_bucket",
            status(self.s3.head_bucket(Bucket=self.bucket)),
            200,
        )
        ok("delete_bucket of a non-empty bucket: BucketNotEmpty, and the bucket stays")

        secret = os.environ["S3_SECRET"]
        wrong_secret = client(
            os.environ["S3_ACCESS"], secret[:-1] + ("y" if secret.endswith("x") else "x")
        )
        expect_error(
            "list_buckets with a wrong secret", ["SignatureDoesNotMatch"], wrong_secret.list_buckets
        )
        expect_error(
            "get_object with a wrong secret",
            ["SignatureDoesNotMatch"],
            wrong_secret.get_object,
            Bucket=self.bucket,
            Key="metadata/doc",
        )
        ok("a wrong secret: SignatureDoesNotMatch")

        unknown = client(
            "AKCOFFERNOSUCHKEY" + secrets.token_hex(4).upper(), os.environ["S3_SECRET"]
        )
        expect_error(
            "list_buckets with an unknown access key", ["InvalidAccessKeyId"], unknown.list_buckets
        )
        ok("an unknown access key: InvalidAccessKeyId")

        anonymous = client(None, None, signature_version=botocore.UNSIGNED)
        expect_error("unsigned list_buckets", ["AccessDenied"], anonymous.list_buckets)
        expect_error(
            "unsigned get_object",
            ["AccessDenied"],
            anonymous.get_object,
            Bucket=self.bucket,
            Key="metadata/doc",
        )
        expect_error(
            "unsigned list_objects_v2",
            ["AccessDenied"],
            anonymous.list_objects_v2,
            Bucket=self.bucket,
        )
        expect_error(
            "unsigned put_object",
            ["AccessDenied"],
            anonymous.put_object,
            Bucket=self.bucket,
            Key="anonymous",
            Body=b"x",
        )
        ok("unsigned requests: AccessDenied")

    def isolation(self):
        """The second user can neither read, change, list nor take over the first one's bucket."""
        other, bucket = self.other, self.bucket
        listed = {b["Name"] for b in other.list_buckets()["Buckets"]}
        for name in [self.bucket, self.listing_bucket]:
            if name in listed:
                raise AssertionError(f"list_buckets of the other user shows {name}")
        ok("the other user's list_buckets does not show the first user's buckets")
        expect_error(
            "other user: get_object",
            ["AccessDenied"],
            other.get_object,
            Bucket=bucket,
            Key="metadata/doc",
        )
        expect_error(
            "other user: head_object",
            ["403", "AccessDenied"],
            other.head_object,
            Bucket=bucket,
            Key="metadata/doc",
        )
        expect_error(
            "other user: head_bucket", ["403", "AccessDenied"], other.head_bucket, Bucket=bucket
        )
        expect_error(
            "other user: list_objects_v2", ["AccessDenied"], other.list_objects_v2, Bucket=bucket
        )
        expect_error(
            "other user: put_object",
            ["AccessDenied"],
            other.put_object,
            Bucket=bucket,
            Key="intruder",
            Body=b"x",
        )
        expect_error(
            "other user: delete_object",
            ["AccessDenied"],
            other.delete_object,
            Bucket=bucket,
            Key="metadata/doc",
        )
        expect_error(
            "other user: copy_object out of the bucket",
            ["AccessDenied"],
            other.copy_object,
            Bucket=bucket,
            Key="stolen",
            CopySource={"Bucket": bucket, "Key": "metadata/doc"},
        )
        expect_error(
            "other user: delete_bucket", ["AccessDenied"], other.delete_bucket, Bucket=bucket
        )
        expect_error(
            "other user: create_bucket of a taken name",
            ["BucketAlreadyExists", "AccessDenied"],
            other.create_bucket,
            Bucket=bucket,
        )
        ok("the other user gets AccessDenied on the first user's bucket")

        object_name = "multipart/not-for-others"
        upload_id = self.create_upload(object_name)
        part = self.upload_part(object_name, upload_id, 1, b"the first user's part")
        upload = {"Bucket": bucket, "Key": object_name, "UploadId": upload_id}
        for name, call, params in [
            (
                "create_multipart_upload",
                other.create_multipart_upload,
                {"Bucket": bucket, "Key": "intruder"},
            ),
            ("list_multipart_uploads", other.list_multipart_uploads, {"Bucket": bucket}),
            ("list_parts", other.list_parts, upload),
            ("upload_part", other.upload_part, {**upload, "PartNumber": 1, "Body": b"x"}),
            (
                "upload_part_copy out of the bucket",
                other.upload_part_copy,
                {
                    **upload,
                    "PartNumber": 2,
                    "CopySource": {"Bucket": bucket, "Key": "metadata/doc"},
                },
            ),
            (
                "complete_multipart_upload",
                other.complete_multipart_upload,
                {**upload, "MultipartUpload": {"Parts": [part]}},
            ),
            ("abort_multipart_upload", other.abort_multipart_upload, upload),
        ]:
            expect_error(f"other user: {name}", ["AccessDenied"], call, **params)
        expect(
            "the first user's upload after the other user's attempts",
            self.list_parts_pages(object_name, upload_id, 1000),
            [(1, len(b"the first user's part"), part["ETag"])],
        )
        expect(
            "the first user's uploads in progress after the other user's attempts",
            self.list_uploads_pages(1000),
            [(object_name, upload_id)],
        )
        self.abort(object_name, upload_id)
        ok("the other user gets AccessDenied on the first user's multipart uploads")

        _, body = self.get("metadata/doc")
        expect_body(
            "the first user's object after the other user's attempts",
            body,
            self.objects["metadata/doc"],
        )
        expect_error(
            "get_object of the intruder's object",
            ["NoSuchKey"],
            self.s3.get_object,
            Bucket=bucket,
            Key="intruder",
        )
        ok("the first user's bucket is unchanged")

    # Clean up ---------------------------------------------------------------------------

    def empty_and_delete(self, bucket):
        uploads = self.s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        for upload in uploads:
            self.s3.abort_multipart_upload(
                Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"]
            )
        object_names = [
            o["Key"] for o in self.s3.list_objects_v2(Bucket=bucket).get("Contents", [])
        ]
        if object_names:
            self.s3.delete_objects(
                Bucket=bucket,
                Delete={"Objects": [{"Key": object_name} for object_name in object_names]},
            )
        self.s3.delete_bucket(Bucket=bucket)

    def clean_up(self):
        for bucket in [self.bucket, self.listing_bucket]:
            self.empty_and_delete(bucket)
        listed = {b["Name"] for b in self.s3.list_buckets()["Buckets"]}
        left = listed & {self.bucket, self.listing_bucket, self.scratch_bucket}
        expect("this run's buckets after clean-up", left, set())
        ok("buckets emptied and deleted")

    def clean_up_after_failure(self):
        """Best effort, so that the first failure stays the one reported."""
        for bucket in [self.bucket, self.listing_bucket, self.scratch_bucket]:
            try:
                self.empty_and_delete(bucket)
            except Exception:
                pass


def main():
    suite = Suite()
    steps = [
        suite.buckets,
        suite.objects_of_many_sizes,
        suite.payload_modes,
        suite.metadata,
        suite.ranges,
        suite.copies,
        suite.deletes,
        suite.multipart_upload,
        suite.multipart_part_copies,
        suite.multipart_errors,
        suite.multipart_listing_and_abort,
        suite.managed_transfer,
        suite.listing,
        suite.presigned,
        suite.errors,
        suite.isolation,
        suite.clean_up,
    ]
    try:
        for step in steps:
            step()
    except BaseException:
        suite.clean_up_after_failure()
        raise
    print("boto3 suite passed", flush=True)


if __name__ == "__main__":
    sys.exit(main())
