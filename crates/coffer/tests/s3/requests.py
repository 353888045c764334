"""Requests through Coffer's S3 gateway whose cost in cluster requests tests/metrics.rs
counts at the OSDs between the steps.

Configured like boto3_suite.py by S3_ENDPOINT, S3_CA, S3_ACCESS and S3_SECRET.

    bucket BUCKET      create the bucket
    put BUCKET COUNT   put COUNT new objects of 64 KiB (keys k0, k1, ...)
    get BUCKET COUNT   get them back, checking each one's content
"""

import os
import sys

import boto3

KIB = 1 << 10


def content(i):
    return (f"object {i} ".encode() * (64 * KIB))[: 64 * KIB]


def main():
    step, bucket = sys.argv[1], sys.argv[2]
    s3 = boto3.client(
        "s3",
        endpoint_url=os.environ["S3_ENDPOINT"],
        aws_access_key_id=os.environ["S3_ACCESS"],
        aws_secret_access_key=os.environ["S3_SECRET"],
        region_name="us-east-1",
        verify=os.environ["S3_CA"],
    )
    if step == "bucket":
        s3.create_bucket(Bucket=bucket)
        return
    count = int(sys.argv[3])
    for i in range(count):
        if step == "put":
            s3.put_object(Bucket=bucket, Key=f"k{i}", Body=content(i))
        elif step == "get":
            body = s3.get_object(Bucket=bucket, Key=f"k{i}")["Body"].read()
            if body != content(i):
                sys.exit(f"object k{i} read back {len(body)} bytes that differ")
        else:
            sys.exit(f"unknown step {step}")


main()
