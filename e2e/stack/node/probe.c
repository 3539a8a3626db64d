/* A tiny static network tool for the test cluster's pods and health checks
 * (image docker.io/flashsale/probe, built by node.sh).
 *
 *   probe connect IP:PORT...        TCP connect to each (2 s timeout); prints
 *                                   one line each, exits 1 if any failed
 *   probe get IP:PORT [PATH]        HTTP/1.0 GET, prints the response
 *   probe serve PORT [MESSAGE]      answers every HTTP request on PORT with
 *                                   200 "MESSAGE HOSTNAME", logs each request
 *   probe sleep                     sleeps until killed
 *
 * Addresses are IPv4 literals: the cluster has no DNS. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int parse_addr(const char *s, struct sockaddr_in *sa) {
  char host[64];
  const char *colon = strrchr(s, ':');
  if (!colon || (size_t)(colon - s) >= sizeof host) return -1;
  memcpy(host, s, (size_t)(colon - s));
  host[colon - s] = 0;
  memset(sa, 0, sizeof *sa);
  sa->sin_family = AF_INET;
  sa->sin_port = htons((unsigned short)atoi(colon + 1));
  return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

/* dial: a connected TCP socket, or -1 with errno set (2 s timeout). */
static int dial(const struct sockaddr_in *sa) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  if (connect(fd, (const struct sockaddr *)sa, sizeof *sa) < 0) {
    if (errno != EINPROGRESS) goto fail;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int n = poll(&p, 1, 2000);
    if (n == 0) {
      errno = ETIMEDOUT;
      goto fail;
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) goto fail;
    if (err) {
      errno = err;
      goto fail;
    }
  }
  fcntl(fd, F_SETFL, flags);
  return fd;
fail:;
  int saved = errno;
  close(fd);
  errno = saved;
  return -1;
}

static int cmd_connect(int argc, char **argv) {
  int failed = 0;
  for (int i = 0; i < argc; i++) {
    struct sockaddr_in sa;
    if (parse_addr(argv[i], &sa) < 0) {
      printf("FAIL %s: not IP:PORT\n", argv[i]);
      failed = 1;
      continue;
    }
    int fd = dial(&sa);
    if (fd < 0) {
      printf("FAIL %s: %s\n", argv[i], strerror(errno));
      failed = 1;
    } else {
      printf("ok   %s\n", argv[i]);
      close(fd);
    }
  }
  return failed;
}

static int cmd_get(int argc, char **argv) {
  struct sockaddr_in sa;
  if (argc < 1 || parse_addr(argv[0], &sa) < 0) {
    fprintf(stderr, "usage: probe get IP:PORT [PATH]\n");
    return 2;
  }
  int fd = dial(&sa);
  if (fd < 0) {
    fprintf(stderr, "FAIL %s: %s\n", argv[0], strerror(errno));
    return 1;
  }
  char req[512];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", argc > 1 ? argv[1] : "/", argv[0]);
  if (write(fd, req, (size_t)n) != n) return 1;
  char buf[4096];
  ssize_t r;
  while ((r = read(fd, buf, sizeof buf)) > 0) fwrite(buf, 1, (size_t)r, stdout);
  close(fd);
  return r < 0;
}

static int cmd_serve(int argc, char **argv) {
  if (argc < 1) {
    fprintf(stderr, "usage: probe serve PORT [MESSAGE]\n");
    return 2;
  }
  const char *msg = argc > 1 ? argv[1] : "hello from";
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  signal(SIGPIPE, SIG_IGN);
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[0]))};
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 64) < 0) {
    perror("bind/listen");
    return 1;
  }
  printf("serving on :%s\n", argv[0]);
  fflush(stdout);
  for (;;) {
    struct sockaddr_in peer;
    socklen_t len = sizeof peer;
    int c = accept(fd, (struct sockaddr *)&peer, &len);
    if (c < 0) continue;
    struct timeval tv = {.tv_sec = 2};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[2048];
    ssize_t n = read(c, buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    buf[strcspn(buf, "\r\n")] = 0;
    char body[512], resp[1024];
    int bl = snprintf(body, sizeof body, "%s %s\n", msg, host);
    int rl = snprintf(resp, sizeof resp,
                      "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                      "Connection: close\r\n\r\n%s",
                      bl, body);
    if (write(c, resp, (size_t)rl) < 0) { /* the peer went away */
    }
    close(c);
    printf("%s %s\n", inet_ntoa(peer.sin_addr), buf);
    fflush(stdout);
  }
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc >= 2 && strcmp(argv[1], "connect") == 0) return cmd_connect(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "get") == 0) return cmd_get(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "serve") == 0) return cmd_serve(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "sleep") == 0) {
    signal(SIGTERM, SIG_DFL);
    for (;;) pause();
  }
  fprintf(stderr, "usage: probe connect IP:PORT... | get IP:PORT [PATH] | serve PORT [MESSAGE] | sleep\n");
  return 2;
}
