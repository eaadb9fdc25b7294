"""Data: adapters from real public data sets into the shapes of :mod:`medpref.contracts`."""
