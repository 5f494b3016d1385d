#!/usr/bin/env python3
"""A CRI client on grpc's C core (Python's grpcio), as the root tests use it.

grpcio is a real non-Rust gRPC client: over a unix socket it sends its own
`:authority` (the percent-encoded socket path), and `--authority` makes it send any
other value, as a grpc-go client that dialed a socket path does (the kubelet before
v1.30 sends the path itself). The messages are written by hand (a few protobuf
fields), so nothing but grpcio is needed.

Usage: grpcio_cri.py TARGET [--authority A]
Prints one JSON object: the Version reply, whether a GetContainerEvents stream was
accepted, and the error of a ContainerStatus for an unknown id (NotFound expected).
"""
import argparse
import json
import sys

import grpc


def field(msg, number):
    """The first length-delimited field `number` of a protobuf message, as bytes."""
    i = 0
    while i < len(msg):
        key, i = varint(msg, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            _, i = varint(msg, i)
        elif wire == 2:
            n, i = varint(msg, i)
            if num == number:
                return msg[i:i + n]
            i += n
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wire}")
    return b""


def varint(b, i):
    shift = value = 0
    while True:
        c = b[i]
        i += 1
        value |= (c & 0x7F) << shift
        if c < 0x80:
            return value, i
        shift += 7


def string_field(number, s):
    data = s.encode()
    return bytes([number << 3 | 2, len(data)]) + data


def main():
    p = argparse.ArgumentParser()
    p.add_argument("target")
    p.add_argument("--authority")
    a = p.parse_args()
    options = [("grpc.default_authority", a.authority)] if a.authority is not None else []
    raw = dict(request_serializer=lambda m: m, response_deserializer=lambda m: m)
    out = {}
    with grpc.insecure_channel(a.target, options=options) as ch:
        version = ch.unary_unary("/runtime.v1.RuntimeService/Version", **raw)
        reply = version(string_field(1, "v1"), timeout=10)
        out["version"] = {
            "runtime_name": field(reply, 2).decode(),
            "runtime_version": field(reply, 3).decode(),
            "runtime_api_version": field(reply, 4).decode(),
        }
        # A second call on the same connection: the HPACK table now holds the first's.
        reply = version(string_field(1, "v1"), timeout=10)
        out["second_call"] = field(reply, 2).decode()
        status = ch.unary_unary("/runtime.v1.RuntimeService/ContainerStatus", **raw)
        try:
            status(string_field(1, "no-such-container"), timeout=10)
            out["status_error"] = None
        except grpc.RpcError as e:
            out["status_error"] = e.code().name
        events = ch.unary_stream("/runtime.v1.RuntimeService/GetContainerEvents", **raw)
        stream = events(b"", timeout=30)
        # Headers back mean the server took the streaming call.
        stream.initial_metadata()
        out["events_stream"] = "open"
        stream.cancel()
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
