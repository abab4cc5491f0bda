"""borgctl: the operator's command line for borg-orchestrator."""
