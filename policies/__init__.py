"""Pure core: domain model, stage protocols, policies, registry, profiles and engine."""
