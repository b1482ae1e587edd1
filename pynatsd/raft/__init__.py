"""nats-server's RAFT (NRG): its wire encodings (codec) and a sans-IO node (node), to take part in a
nats-server JetStream cluster's groups. Pure: nothing here imports the broker; a transport feeds it."""
