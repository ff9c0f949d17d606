"""A real OTLP profiles client for server/tests/suite/otlp.rs, built only from PyPI packages:
opentelemetry-proto's generated messages, grpcio and protobuf.

    export.py fields          print the package's field numbers and types as JSON
    export.py send URL        export one CPU profile over gRPC, HTTP protobuf and
                              HTTP JSON (service.name py-grpc, py-http-proto,
                              py-http-json), then one invalid request over gRPC
"""
import json
import sys
import time
import urllib.request

import grpc
from google.protobuf import json_format
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
from opentelemetry.proto.common.v1 import common_pb2 as common
from opentelemetry.proto.profiles.v1development import profiles_pb2 as prof
from opentelemetry.proto.resource.v1 import resource_pb2 as resource

METHOD = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"
PERIOD_NS = 10_000_000


def fields():
    out = {}

    def walk(m):
        out[m.full_name] = {
            f.name: [f.number, f.type, bool(f.is_repeated)] for f in m.fields
        }
        for n in m.nested_types:
            walk(n)

    for mod in (common, resource, prof, svc):
        for m in mod.DESCRIPTOR.message_types_by_name.values():
            walk(m)
    print(json.dumps(out))


def request(service, stack_index=1):
    """main -> work, sampled by time twice and once more as a value of 3: five
    samples of 10 ms CPU each."""
    strings = ["", "samples", "count", "cpu", "nanoseconds", "main", "work", "app.py", "thread.name", "worker"]
    d = prof.ProfilesDictionary(string_table=strings)
    d.mapping_table.add()
    d.location_table.add()
    d.function_table.add()
    d.link_table.add()
    d.attribute_table.add()
    d.stack_table.add()
    d.function_table.add(name_strindex=5, filename_strindex=7)
    d.function_table.add(name_strindex=6, filename_strindex=7)
    d.location_table.add(address=0x10, lines=[prof.Line(function_index=1, line=3)])
    d.location_table.add(address=0x20, lines=[prof.Line(function_index=2, line=9)])
    d.stack_table.add(location_indices=[2, 1])  # leaf first
    d.attribute_table.add(key_strindex=8, value=common.AnyValue(string_value="worker"))
    now = time.time_ns()
    p = prof.Profile(
        sample_type=prof.ValueType(type_strindex=1, unit_strindex=2),
        period_type=prof.ValueType(type_strindex=3, unit_strindex=4),
        period=PERIOD_NS,
        time_unix_nano=now - 3_000_000_000,
        duration_nano=3_000_000_000,
        profile_id=bytes(range(1, 17)),
    )
    p.samples.add(stack_index=stack_index, attribute_indices=[1],
                  timestamps_unix_nano=[now - 2_000_000_000, now - 1_000_000_000])
    p.samples.add(stack_index=stack_index, values=[3])
    attrs = [
        common.KeyValue(key="service.name", value=common.AnyValue(string_value=service)),
        common.KeyValue(key="host.name", value=common.AnyValue(string_value="pyhost")),
        common.KeyValue(key="process.pid", value=common.AnyValue(int_value=4242)),
    ]
    req = svc.ExportProfilesServiceRequest(dictionary=d)
    rp = req.resource_profiles.add(resource=resource.Resource(attributes=attrs))
    sp = rp.scope_profiles.add(scope=common.InstrumentationScope(name="export.py"))
    sp.profiles.append(p)
    return req


def post(url, body, content_type):
    r = urllib.request.Request(url + "/v1development/profiles", data=body, method="POST",
                               headers={"Content-Type": content_type})
    with urllib.request.urlopen(r, timeout=30) as resp:
        return resp.headers.get("Content-Type"), resp.read()


def send(url):
    target = url.removeprefix("http://")
    with grpc.insecure_channel(target) as channel:
        export = channel.unary_unary(
            METHOD,
            request_serializer=svc.ExportProfilesServiceRequest.SerializeToString,
            response_deserializer=svc.ExportProfilesServiceResponse.FromString,
        )
        resp = export(request("py-grpc"), timeout=30)
        assert not resp.HasField("partial_success"), resp
        print("grpc ok")
        try:
            export(request("py-bad", stack_index=9), timeout=30)
            raise SystemExit("an invalid export was accepted")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
            assert "stack_table[9]" in e.details(), e.details()
            print("grpc invalid_argument ok")

    ct, body = post(url, request("py-http-proto").SerializeToString(), "application/x-protobuf")
    assert ct == "application/x-protobuf", ct
    svc.ExportProfilesServiceResponse.FromString(body)
    print("http protobuf ok")

    ct, body = post(url, json_format.MessageToJson(request("py-http-json")).encode(), "application/json")
    assert ct == "application/json", ct
    json_format.Parse(body, svc.ExportProfilesServiceResponse())
    print("http json ok")


if __name__ == "__main__":
    if sys.argv[1] == "fields":
        fields()
    else:
        send(sys.argv[2])
