"""Playbook `tenants`: one tenant takes more of the engine than its share while others wait
(the long-document tenant). Runbook: playbooks/tenants/tenants.md.

Modules: `accounting` (each request and tenant priced on the roofline; `tenant_table` and
`request_table` return pandas DataFrames for the Python API), `contention` (the shares while
tenants competed, against their entitlement), `playbook` (the finding and the Diagnosis).
"""

from playbooks.tenants.accounting import request_table, tenant_table
from playbooks.tenants.playbook import TenantOptions, diagnose_tenants

__all__ = ["TenantOptions", "diagnose_tenants", "request_table", "tenant_table"]
