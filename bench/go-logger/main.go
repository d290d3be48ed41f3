// Command go-logger is the client-go baseline for bench/: a minimal pod event
// logger written exactly the way the classic Go teaching controllers
// (kubewatch, demo-controller, sample-controller) write one, so the Rust
// logger can be measured side by side against it.
//
// A SharedInformerFactory watches Pods in all namespaces; the event handlers
// compute the key and enqueue a small {key, eventType} item on a rate-limited
// workqueue (UpdateFunc fires on every resync too, as in the seeds); N workers
// pop items and log one line per item: `onAdd: ns/name`, `onUpdate: ns/name`
// or `onDelete: ns/name`. Once the cache has synced it logs one
// `cache synced pods=N elapsed_ms=M` line. All logging goes to stdout.
//
// Build with bench/build-go-logger.sh.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
)

type eventType string

const (
	onAdd    eventType = "onAdd"
	onUpdate eventType = "onUpdate"
	onDelete eventType = "onDelete"
)

// item is what the handlers enqueue. The workqueue deduplicates equal items
// that are still pending, exactly as it does in the seeds.
type item struct {
	key       string
	eventType eventType
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig (empty: in-cluster config)")
	resync := flag.Duration("resync", 0, "informer resync period, e.g. 100s (0 disables resync)")
	workers := flag.Int("workers", 2, "number of workers processing the queue")
	flag.Parse()

	log.SetOutput(os.Stdout)
	log.SetFlags(log.Ldate | log.Ltime | log.Lmicroseconds)

	if *workers < 1 {
		log.Fatalf("error: --workers must be at least 1, got %d", *workers)
	}

	// BuildConfigFromFlags falls back to the in-cluster config when the path is empty.
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatalf("error: building client config: %v", err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		log.Fatalf("error: creating clientset: %v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[item]())

	factory := informers.NewSharedInformerFactory(client, *resync)
	podInformer := factory.Core().V1().Pods()
	informer := podInformer.Informer()
	_, err = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
				queue.Add(item{key: key, eventType: onAdd})
			}
		},
		UpdateFunc: func(oldObj, newObj interface{}) {
			// No ResourceVersion comparison: every update, resyncs included, is enqueued.
			if key, err := cache.MetaNamespaceKeyFunc(newObj); err == nil {
				queue.Add(item{key: key, eventType: onUpdate})
			}
		},
		DeleteFunc: func(obj interface{}) {
			// Handles cache.DeletedFinalStateUnknown tombstones too.
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				queue.Add(item{key: key, eventType: onDelete})
			}
		},
	})
	if err != nil {
		log.Fatalf("error: adding event handler: %v", err)
	}

	start := time.Now()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		// Only reached when a signal arrives before the sync.
		queue.ShutDown()
		factory.Shutdown()
		log.Printf("shutdown before the cache synced")
		return
	}
	pods, _ := podInformer.Lister().List(labels.Everything())
	log.Printf("cache synced pods=%d elapsed_ms=%d", len(pods), time.Since(start).Milliseconds())

	var wg sync.WaitGroup
	for i := 0; i < *workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for processNextWorkItem(queue) {
			}
		}()
	}

	<-ctx.Done()
	// ShutDown ignores further Adds; Get keeps handing out what is already
	// queued and returns shutdown=true once the queue is empty, so the workers
	// drain the queue and return.
	queue.ShutDown()
	wg.Wait()
	factory.Shutdown()
	log.Printf("shutdown complete")
}

// processNextWorkItem handles one item: Get, log the line, Forget, Done. It
// returns false once the queue has been shut down.
func processNextWorkItem(queue workqueue.TypedRateLimitingInterface[item]) bool {
	it, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(it)
	log.Printf("%s: %s", it.eventType, it.key)
	queue.Forget(it)
	return true
}
