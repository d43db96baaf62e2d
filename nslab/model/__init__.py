"""Model: topologies as data (nodes, links, typed fields, shaping, names, limits),
read from YAML and validated without root; nothing here touches the machine."""
