"""The process and the machine it runs on (its launcher and process group, device, CPUs, container), for
training and evaluation alike; nothing here knows about models, data or training."""
