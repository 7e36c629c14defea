"""The process and the machine it runs on, for training and evaluation alike: :mod:`.distributed` (its
launcher, rank and process group), :mod:`.device` (device, autocast, joining the job), :mod:`.cpus` and
:mod:`.workers` (the CPUs it may use; its threads and loader workers), :mod:`.container` (a container's
volumes). Nothing here knows about models, data or training."""
