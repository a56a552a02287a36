"""Classic groups (JoinGroup / SyncGroup / Heartbeat / LeaveGroup)."""
