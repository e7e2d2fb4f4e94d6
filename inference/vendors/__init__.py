"""Vendor adapters: wire formats only (nothing of accounts, billing or the catalog's models).

One module per wire format behind the protocol of :mod:`inference.vendors.base`;
:func:`inference.vendors.registry.adapter_for` maps a catalog adapter kind to its adapter. The
package itself imports nothing, so its modules can import one another one way.
"""
