"""TEST FIXTURE: a minimal logging HTTP forward proxy for nvidia_repo's checks (molecule/libraries).

Every request it forwards is appended to the log as "<METHOD> <absolute URL>", so the
verifier can tell that downloads for the repository went through the configured proxy.
"""

import sys
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = sys.argv[2]
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade"}
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Proxy(BaseHTTPRequestHandler):
    def forward(self, with_body: bool) -> None:
        with open(LOG, "a", encoding="utf-8") as log:
            log.write(f"{self.command} {self.path}\n")
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        request = urllib.request.Request(self.path, headers=headers, method=self.command)
        try:
            response = DIRECT.open(request, timeout=30)
        except urllib.error.HTTPError as err:
            response = err
        body = response.read() if with_body else b""
        self.send_response(response.status if hasattr(response, "status") else response.code)
        for key, value in response.headers.items():
            if key.lower() not in HOP_BY_HOP | {"content-length"}:
                self.send_header(key, value)
        self.send_header(
            "Content-Length",
            str(len(body)) if with_body else response.headers.get("Content-Length", "0"),
        )
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.forward(with_body=True)

    def do_HEAD(self) -> None:
        self.forward(with_body=False)


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Proxy).serve_forever()
