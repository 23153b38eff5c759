"""Delivery to consumer groups: membership, assignment, leases.

Every fact lives in the metadata store (``group_members``, ``group_partitions``, ``group_leases``), so any
API process answers any call of any member; nothing here keeps state between calls.
"""
