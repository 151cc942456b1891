"""Inspection (a side door opened on request): capture, one-sentence inspection, head statistics, interventions, flow, attribution, alignment."""
