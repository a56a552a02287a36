"""Adapters between the pure core and the outside world (protobuf codecs, conversions).

Only adapter and service modules import generated ``*_pb2`` code.
"""
