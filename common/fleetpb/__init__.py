"""Generated protobuf and gRPC code for the fleet.v1 protocol (see protos/fleet/v1/).

Written by tools/gen_protos.py; do not edit. Import modules as
`from common.fleetpb import coordinator_pb2`. Only the edges (codecs, servicers, the worker's
client) may import this package: the pure core never does (tests/test_tidy.py checks).
"""
