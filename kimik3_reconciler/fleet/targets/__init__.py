"""Where a fleet runs beside its own Ansible rollout: one module per target, each holding what differs there (the
way engines/ holds what differs between serving engines). kubernetes.py: `kimik3 fleet render --target kubernetes`,
the manifests a GitOps repo commits (kubernetes_router.py: smg in front; kubernetes_objects.py: the manifests'
shared values; kubernetes_section.py: the fleet file's `kubernetes:` section)."""
