#!/bin/bash
# ansible-playbook from the carried ansible-core wheels, with the repository's ansible.cfg
exec env PYTHONPATH=/tmp/ans ANSIBLE_CONFIG=ansible.cfg /opt/torch/.venv/bin/python3 /tmp/ans/bin/ansible-playbook -i .gpu/hosts.yml "$@"
