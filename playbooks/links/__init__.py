"""Playbook `links`: what the link probes linked to a run (`infbench probe links --run RUN`,
`infbench probe import-nccl-tests --run RUN`) found about the hosts' links: a slow rank or a
slow pair, as a finding the triage can join with what the run's clients saw."""

from playbooks.links.playbook import LinksOptions, diagnose_links

__all__ = ["LinksOptions", "diagnose_links"]
