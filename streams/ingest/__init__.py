"""Bars into `bars.raw`: DBN files (`barcast replay`) and the Databento Live API
(`barcast ingest-live`), both through one encoder and one producer so the two paths cannot
disagree on the message format.
"""
